/* Several hosts behind one front proxy (README "Several hosts"): this
 * host's id, which every id it makes carries (protocol/fleetid.h); drain;
 * the capacity line HAProxy's agent-check reads; and the lists of kernels,
 * sessions and E2B sandboxes of the whole fleet, gathered from --peer
 * gateways. */
#ifndef GLOVEBOX_FLEET_H
#define GLOVEBOX_FLEET_H

#include "gateway/core/config.h"
#include "gateway/core/http.h"
#include "protocol/fleetid.h"

#include <jansson.h>
#include <stdbool.h>

#define FLEET_MAX_PEERS       32
#define FLEET_PEER_ANSWER_MAX (16 * 1024 * 1024) /* one peer's list, head included */
#define FLEET_PEER_HEADER     "x-glovebox-fleet-peer:"

/* Validates --host-id, --agent-listen and --peer; prints the reason and
 * returns -EINVAL on a bad one. Called from config validation. */
int fleet_configure(const struct config *cfg);
/* Opens the agent's listening socket (--agent-listen) on the loop. */
int fleet_start(const struct config *cfg);
void fleet_stop(void);

/* This host's id, "" for a single host. */
const char *fleet_host_id(void);
/* A new id of a kernel, session or terminal: a UUID naming this host. */
int fleet_new_uuid(char out[JP_UUID_SIZE]);
/* A new E2B sandbox id naming this host. */
int fleet_new_sandbox_id(char out[FLEETID_SANDBOX_SIZE]);

/* Draining: no new kernels or sandboxes here, existing ones keep working. */
bool fleet_draining(void);
/* Replies 503 with a JSON message when draining and returns true. */
bool fleet_refuse_if_draining(struct http_request *r);
/* The current free capacity in percent (0-100): the least of the free
 * kernel slots and the available memory. */
int fleet_capacity_percent(void);
/* What counts this host's kernels for its capacity and its state (the
 * kernels' registry: core counts nothing of its own). */
void fleet_count_kernels(size_t (*count)(void));

/* Answers a list route with local (stolen) merged with the same list of
 * every peer, asked with the caller's own credentials; a peer that does
 * not answer in --peer-timeout is left out and named in the answer's
 * X-Glovebox-Fleet-Missing header. A request from a peer, or a gateway
 * without peers, gets local alone. */
void fleet_reply_list(struct http_request *r, json_t *local);
/* The same for a paged list: finish(r, list) puts the whole list, this
 * host's and its peers' together, in order and cuts it to a page (setting
 * r's next token) before it goes out. A peer's request gets this host's
 * list unfinished: a host answering one (fleet_from_peer) gives one
 * sandbox more than a page, so that the asking host sees whether more
 * follow. */
typedef void (*fleet_list_finish_fn)(struct http_request *r, json_t *list);
void fleet_reply_page(struct http_request *r, json_t *local, fleet_list_finish_fn finish);
/* Whether r is a peer's request for this host's own list. */
bool fleet_from_peer(struct http_request *r);

/* A call naming this host's own id as its caller's (FLEET_PEER_HEADER):
 * another gateway was started with the same --host-id. Answers 409, logs
 * it (rate-limited) and returns true. */
bool fleet_refuse_same_host_id(struct http_request *r);
/* At start, before serving: asks every --peer at once, within
 * --peer-timeout, whether it has this host's id. -EEXIST, logged with the
 * peer's URL, if one has; a peer that cannot be reached is not checked
 * (it checks this host when it starts). Blocks: call before the loop runs. */
int fleet_check_peers(void);

/* GET /api/fleet, POST|DELETE /api/fleet/drain. */
void fleet_handle(struct http_request *r, const char *what);

#endif
