/* The gateway's view of sandboxes: each one is made by the kernel-host,
 * reference-counted by what runs in it (kernels, an E2B sandbox, commands)
 * and destroyed with its last reference. */
#ifndef GLOVEBOX_SANDBOXES_H
#define GLOVEBOX_SANDBOXES_H

#include "protocol/hostmsg.h"
#include "protocol/ids.h"

#include <limits.h>
#include <jansson.h>
#include <stdbool.h>

#define SANDBOX_REQUEST_HOST_MAX 256
#define SANDBOX_MAX_PUBLIC_PORTS 32

enum sandbox_phase { SANDBOX_CREATING, SANDBOX_READY, SANDBOX_GONE };

struct sandbox;

/* Someone waiting for a sandbox to be ready. ready() runs once, with
 * error NULL on success. */
struct sandbox_waiter {
        struct sandbox_waiter *next;
        struct sandbox *sandbox;
        void (*ready)(struct sandbox_waiter *w, struct sandbox *sb, const char *error);
};

struct sandbox {
        struct sandbox *next;
        char id[JP_UUID_SIZE];
        enum sandbox_phase phase;
        struct hostmsg_limits limits;
        struct hostmsg_network network; /* its egress (enabled false: none), owned */
        char **volumes; /* volumes mounted ("UUID:/path", volumes.h), owned; NULL: none */
        int init_pid;
        unsigned user_uid, user_gid; /* host ids owning what the gateway writes inside */
        /* host ids of its own root (uid 0 inside, never host root); has_root
         * false when its user namespace maps none */
        bool has_root;
        unsigned root_uid, root_gid;
        char root[PATH_MAX];         /* host path of its root (informative) */
        /* its cgroup's name when not its id (a sandbox made ahead on v2,
         * hostmsg.h); "": the id */
        char cgroup[JP_UUID_SIZE];
        int root_fd;                 /* its root directory: file access resolves in it */
        char error[HOSTMSG_ERROR_SIZE];
        unsigned refs;
        bool destroying;             /* asked the kernel-host to destroy it */
        struct sandbox_waiter *waiters;
        /* ports reached through the gateway without a token (ports.h) */
        unsigned short public_ports[SANDBOX_MAX_PUBLIC_PORTS];
        size_t npublic_ports;
        bool all_ports_public; /* every port of it needs no token */
        /* the Host header its apps get ("${PORT}" the port's number), or ""
         * for 127.0.0.1:PORT (ports.h) */
        char request_host[SANDBOX_REQUEST_HOST_MAX];
        bool kept; /* recorded for a restart that keeps kernels */
};

/* Asks for a new sandbox with limits; the caller holds the one reference.
 * ro_paths (NULL-terminated, may be NULL) are bound read-only inside. */
int sandbox_new(const struct hostmsg_limits *limits, char *const *ro_paths, bool confined,
                struct sandbox **out);
/* The same, with template_root's tree (NULL or "": none) as its root
 * under an overlay (see gateway/kernels/templates.h). */
int sandbox_new_in(const struct hostmsg_limits *limits, char *const *ro_paths,
                   const char *template_root, bool confined, struct sandbox **out);
/* The same, with egress (gateway/kernels/egress.h; NULL: none): network is copied. */
int sandbox_new_networked(const struct hostmsg_limits *limits, char *const *ro_paths,
                          const char *template_root, bool confined,
                          const struct hostmsg_network *network, struct sandbox **out);
/* What a sandbox mounts beside its template: a built template's layers
 * (kernel-host/layers.h), a build's new one, and volumes (volumes.h). */
struct sandbox_layers {
        char *const *ids;  /* top first, NULL-terminated; NULL: none */
        const char *build; /* a build's new layer's id, or NULL */
        uint64_t build_mb; /* its size */
        char *const *volumes; /* "UUID:/path", NULL-terminated; NULL: none (copied) */
};
/* The same, with layers (NULL: none). */
int sandbox_new_layered(const struct hostmsg_limits *limits, char *const *ro_paths,
                        const char *template_root, bool confined,
                        const struct hostmsg_network *network,
                        const struct sandbox_layers *layers, struct sandbox **out);
/* A sandbox made again from a memory checkpoint (host.h's
 * host_sandbox_restore) with the limits it had, or a copy of the one it
 * was taken from (a fork); the caller holds the one reference. */
int sandbox_new_restored(const struct hostmsg_limits *limits, const char *checkpoint, bool copy,
                         struct sandbox **out);
/* Calls w->ready when sb is ready (now, if it already is, or has failed). */
void sandbox_when_ready(struct sandbox *sb, struct sandbox_waiter *w);
void sandbox_waiter_cancel(struct sandbox_waiter *w);
struct sandbox *sandbox_ref(struct sandbox *sb);
/* Drops a reference; the last one destroys the sandbox. Nulls *sb. */
void sandbox_unref(struct sandbox **sb);

/* A sandbox kept across a restart (gateway/kernels/keep.h): kept's id, limits,
 * ids and root as recorded, root_fd inherited across execve (now ours).
 * Ready, one reference (the caller's); no egress is kept. */
int sandbox_adopt(const struct sandbox *kept, int root_fd, struct sandbox **out);
/* Marks a ready sandbox without egress to be kept across execve; -EINVAL
 * for one that cannot be. */
int sandbox_keep(struct sandbox *sb);
/* The ids of every live sandbox not marked kept, for the record: the new
 * image has them destroyed once it runs, so that nothing unrecorded leaks
 * and a failed exec loses nothing. A new array (the caller's), or NULL. */
json_t *sandboxes_unkept_ids(void);
/* Forgets every mark of sandbox_keep (a restart that did not happen) and
 * makes every root descriptor close on exec again. */
void sandboxes_keep_reset(void);
/* Just before execve: the kept sandboxes' root descriptors survive it. */
void sandboxes_keep_inheritable(void);

/* Someone waiting for a named sandbox to wake (sandbox_name_wake).
 * done() runs once, never from within sandbox_name_wake: error NULL once
 * the sandbox runs (sandbox_resolve_name finds it then), else why not. */
struct sandbox_wake {
        struct sandbox_wake *next; /* the family's, while it waits */
        char name[JP_UUID_SIZE];
        bool waiting;
        void (*done)(struct sandbox_wake *w, const char *error);
};

/* Names a family gives running sandboxes (E2B: its sandbox ids, which
 * getHost puts in a port's Host name), for ports/ to find them by:
 * resolve gives the sandbox of name with its owner's name, or false;
 * token_ok whether token opens its ports (the sandbox's traffic token),
 * running or asleep. A sandbox may sleep with no box at all and wake on
 * a request to it (E2B's autoResume): asleep says so, giving its owner
 * and filling shape (a zeroed stand-in, never a live sandbox) with what
 * admitting a request to its ports reads (its public ports, its apps'
 * Host); wake starts waking it for w (0; the family calls
 * sandbox_wake_finish within a bounded time), or -errno; wake_cancel
 * takes a waiting w back. NULL asleep: no name sleeps. One family's,
 * set at start. */
struct sandbox_names {
        bool (*resolve)(const char *name, struct sandbox **box, const char **owner);
        bool (*token_ok)(const char *name, const char *token);
        bool (*asleep)(const char *name, struct sandbox *shape, const char **owner);
        int (*wake)(const char *name, struct sandbox_wake *w);
        void (*wake_cancel)(struct sandbox_wake *w);
};
void sandboxes_set_names(const struct sandbox_names *names);
bool sandbox_resolve_name(const char *name, struct sandbox **box, const char **owner);
bool sandbox_name_token_ok(const char *name, const char *token);
bool sandbox_name_asleep(const char *name, struct sandbox *shape, const char **owner);
/* Wakes the sandbox of name for w (w->done set by the caller, who keeps
 * w until done runs or it cancels). 0, -ENOENT when no such name sleeps,
 * or the family's -errno. */
int sandbox_name_wake(const char *name, struct sandbox_wake *w);
/* Stops waiting (nothing when w does not wait); done is not called. */
void sandbox_name_wake_cancel(struct sandbox_wake *w);
/* For the family: w's wait is over (error NULL: its sandbox runs). */
void sandbox_wake_finish(struct sandbox_wake *w, const char *error);

/* A port number from s (len bytes): 1-65535, or -1. */
int sandbox_port_number(const char *s, size_t len);
/* Reads "8000, 8080" (at most SANDBOX_MAX_PUBLIC_PORTS) into box's
 * public ports (box NULL: only checks). 0 or -EINVAL with err. */
int sandbox_parse_public_ports(const char *text, struct sandbox *box, char *err, size_t errlen);
/* Reads the Host header a sandbox's apps get, a name or address with an
 * optional ":port", where SANDBOX_PORT_PLACEHOLDER stands for the port
 * asked for (E2B's network.maskRequestHost), into box (NULL: only
 * checks). 0 or -EINVAL with err. */
#define SANDBOX_PORT_PLACEHOLDER "${PORT}"
int sandbox_parse_request_host(const char *text, struct sandbox *box, char *err, size_t errlen);

#endif
