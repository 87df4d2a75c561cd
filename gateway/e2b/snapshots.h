/* E2B's snapshots and forks, of a sandbox's files (docs/e2b.md#snapshots
 * -and-forks): create_snapshot keeps the files of a running sandbox's
 * /home/user under an id of their own (kernels/pause.h's snapshots store,
 * counted against the owner's --pause-quota-mb), Sandbox.create(snapshot
 * id) starts a new sandbox of the snapshot's template, environment and
 * limits with those files, list_snapshots and delete_snapshot (E2B's
 * DELETE /templates/{id}) list and remove them; fork(count) is a snapshot
 * that count new sandboxes start from, the source running on. Files only,
 * as pause: variables and processes are not kept, and every answer that
 * shows a snapshot says so. */
#ifndef GLOVEBOX_E2B_SNAPSHOTS_H
#define GLOVEBOX_E2B_SNAPSHOTS_H

#include "gateway/core/http.h"
#include "gateway/e2b/sandbox.h"

#include <stdbool.h>

/* Reads the snapshots kept under --state-dir (at start). */
void e2b_snapshots_load(void);
/* The control plane's GET /snapshots and DELETE /templates/{snapshot id}:
 * whether route was one of them (answered). */
bool e2b_snapshots_handle(struct http_request *r, const char *route);
/* POST /sandboxes/{id}/snapshots {name?}: answered once the files are kept. */
void e2b_snapshot_begin(struct e2b_sandbox *s, struct http_request *r);
/* POST /sandboxes/{id}/fork {count?, timeout?}: answered once every fork
 * runs or failed, each on its own. */
void e2b_fork_begin(struct e2b_sandbox *s, struct http_request *r);
/* POST /sandboxes with a snapshot's id as its template: whether tid is
 * one the caller may use (then r is answered, as a create). */
bool e2b_create_from_snapshot(struct http_request *r, const char *tid, json_t *body,
                              double lifetime);

#endif
