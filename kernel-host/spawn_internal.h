/* What the parts of the kernel-host's sandboxes and processes (spawn.h)
 * share: the registry of both, which also reaps them (spawn.c), the making
 * and freeing of a sandbox (spawn_sandbox.c), the start of a process in one
 * (spawn_start.c), and what a process is started with: its command line,
 * environment and a kernel's connection file (spawn_args.c). */
#ifndef GLOVEBOX_SPAWN_INTERNAL_H
#define GLOVEBOX_SPAWN_INTERNAL_H

#include "kernel-host/net.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/zygote.h"
#include "protocol/connfile.h"
#include "protocol/hostmsg.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IPC_DIR  "ipc"  /* without a sandbox: sockets and connection files */
#define ROOT_DIR "root" /* the sandbox's root mount point */

struct box {
        struct box *next;
        char id[JP_UUID_SIZE];
        char run_dir[PATH_MAX];
        char ipc_dir[PATH_MAX + 8]; /* without a sandbox: where the sockets are */
        int plain_ipc_fd;           /* ipc_dir opened (O_PATH), without a sandbox */
        bool sandboxed;
        bool templated;                 /* its root is a template's tree, not the host's /usr */
        char template_root[PATH_MAX];   /* that tree, when templated */
        char build_layer[JP_UUID_SIZE]; /* a build's: sealed when the box goes (layers.h) */
        struct sandbox sandbox;
        struct net_egress net; /* slot -1: no network */
        json_t *network;       /* its egress policy (hostmsg_network_encode); NULL: none */
        char **volumes;        /* its volumes, "id:/path" (NULL-terminated); NULL: none */
        bool disk_home;        /* its /home/user is a disk (homedisk.h) */
        char **layers;         /* a built template's layers, top first; NULL: none */
        int slot;
        uint64_t oom_seen; /* out-of-memory kills already reported */
        bool init_alive;
        bool gone_reported; /* SANDBOX_GONE sent: nothing more starts in it */
        int procs;          /* processes not yet reaped */
        /* A memory checkpoint can take it (checkpoint.h): the host's form
         * or a template's tree on an overlay (with a built template's
         * layers), as root, with nothing mounted from outside but volumes
         * and a disk home, not a build's, and no process forked from a
         * zygote. */
        bool checkpointable;
        /* A kernel's process forked ahead into it while it was in the
         * stock (zygote.h; NULL: none), in its group ZYGOTE_AHEAD_GROUP
         * within the sandbox's: the first zygote kernel started here is
         * that process, anything else started here first ends it. */
        struct zygote_ahead *ahead;
        bool ahead_left;  /* its group left behind, empty or emptying (spawn_drop_ahead) */
        bool ahead_asked; /* the stock asked a zygote for its process (stock.c) */
};

struct proc {
        struct proc *next;
        char id[JP_UUID_SIZE];
        struct box *box;
        pid_t reap; /* our child to wait for, without a sandbox; 0 in one */
        pid_t pid;  /* the process, leader of its group */
        struct sandbox_process sp;
        struct kernel_cgroup cgroup; /* its own, within the sandbox's */
        bool kernel;                 /* its files (connection, sockets) go when it ends */
        /* A command's stdin, stdout and stderr pipes as the sandbox holds
         * them (their inodes; 0: none, a kernel's or a terminal's): a
         * restore puts new pipes to the gateway in their place. */
        ino_t pipes[3];
        /* A command's terminal as the sandbox holds it (the peer's device
         * and its devpts instance; 0: none): a restore puts a new one, its
         * master the gateway's, in its place. */
        dev_t tty_rdev, tty_dev;
};

/* spawn_start.c: the zygote of the last kernel started from one, which
 * the stock forks its processes ahead from ("": none yet). */
const char *spawn_last_zygote(void);
/* spawn_start.c: a process the sandbox whose init is init_pid has reaped
 * (nspid, as its init reported it), which may be that of a start under
 * way: the starts that can be are answered, so that its end is reported
 * after its start. */
void spawn_starting_ended(pid_t init_pid, pid_t nspid);
/* Whether pid was a starter of a start under way (sandbox_exec_begin's),
 * which is reaped now. */
bool spawn_starting_reaped(pid_t pid);
/* Ends b's process forked ahead, if it has one; with wait, once it is
 * gone, removes its group too, or the one an earlier call left (else the
 * sandbox's end does). */
void spawn_drop_ahead(struct box *b, bool wait);

/* spawn.c: the registry. A box or proc is found by its id; add links one
 * in (the registry owns it from then on), unlink takes a box out again
 * without freeing it. */
struct box *spawn_box_find(const char *id);
struct proc *spawn_proc_find(const char *id);
void spawn_box_add(struct box *b);
void spawn_box_unlink(struct box *b);
void spawn_proc_add(struct proc *p);
/* The process after p in the registry (NULL: the first); NULL past the last. */
struct proc *spawn_proc_next(struct proc *p);
/* Fills fail: the id, the step, and a message naming both, error's text
 * and detail (when not NULL). */
void spawn_fail_set(struct hostmsg_failed *fail, const char *id, const char *step, int error,
                    const char *detail);
/* Tells the gateway, through report, that nothing can start in b any more. */
void spawn_report_gone(struct box *b, void (*report)(enum hostmsg_type, json_t *));

/* spawn_sandbox.c: unlinks b, releases all it holds and frees it (its
 * build's layer sealed and reported); b's init and processes are all gone. */
void spawn_box_free(struct box *b, void (*report)(enum hostmsg_type, json_t *));

/* spawn_sandbox.c, for a request or ahead of one (stock.h): makes the box
 * of req, named id, with its sandbox (or, without one, a plain directory);
 * not listed (spawn_box_add). On failure fills fail, leaves nothing behind
 * and returns -errno. */
int spawn_box_make(const struct hostmsg_sandbox *req, const char *id, struct box **out,
                   struct hostmsg_failed *fail);
/* Undoes spawn_box_make for a box not listed: kills its sandbox and waits
 * for its init (reaped: already waited for) and frees it all. */
void spawn_box_unmake(struct box *b, bool reaped);

/* spawn_sandbox.c, for a restore (checkpoint.h): a sandboxed box's entry
 * and run directory, not yet added (spawn_box_discard undoes it), and the
 * slot of its host ids, found from its root's: taken for b, or -EBUSY when
 * a live sandbox has them (a slot a checkpoint holds is taken over); ids
 * that are not from our range leave b without a slot. */
int spawn_box_new(const char *id, struct box **out, struct hostmsg_failed *fail);
void spawn_box_discard(struct box *b);
int spawn_slot_claim(struct box *b, unsigned setup_uid);
/* A slot of its own for b, a copy of another sandbox: its host ids in
 * ids. 0, or -EAGAIN when none is free. */
int spawn_slot_new(struct box *b, struct sandbox_ids *ids);
/* Egress again for b, running, whose network a checkpoint took away
 * (net_detach): the slot prefer if it is free (else /etc/resolv.conf is
 * written for the new one). Logs what fails: b then has no network. */
void spawn_box_network_back(struct box *b, int prefer);
/* A checkpoint of b holds its host ids from now on (b is being killed):
 * its restore may take them while b is still going. */
void spawn_box_hold_slot(struct box *b);
/* A checkpoint that held the slot of setup_uid is gone: free it. */
void spawn_slot_unhold(unsigned setup_uid);

/* spawn_args.c. A kernel's argv with "{connection_file}" (connection_file)
 * and "{resource_dir}" expanded, a command's as it is; the program found on
 * the kernel's PATH. The environment is a fixed base with home as HOME,
 * then req's entries. Both NULL-terminated, the caller frees them with
 * spawn_strv_free; NULL when out of memory or an argument grows too long. */
char **spawn_build_argv(const struct hostmsg_start *req, const char *connection_file);
char **spawn_build_env(const struct hostmsg_start *req, const char *home);
void spawn_strv_free(char **v);
/* Fills conn with a kernel's connection (its sockets in b's ipc
 * directory), name with its file's name there, inside with the file's path
 * as the kernel sees it and prefix with the sockets' as the gateway does. */
void spawn_prepare_connection(const struct box *b, const struct hostmsg_start *req,
                              struct jp_connection *conn, char *name, size_t name_size,
                              char *inside, size_t inside_size, char *prefix, size_t prefix_size);
/* Removes the connection file and sockets of kernel id from b's ipc
 * directory. */
void spawn_remove_kernel_files(const struct box *b, const char *id);

#endif
