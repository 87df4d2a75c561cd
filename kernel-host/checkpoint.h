/* Memory checkpoints of a whole sandbox with CRIU, as
 * docs/design/criu-recipe.md found them to work: a checkpoint is a
 * directory of the kernel-host's own (--checkpoints-dir, 0700, never
 * reachable from a sandbox) holding CRIU's images of the sandbox's init
 * and every process under it, a tar archive of its tmpfs top (the root's
 * base and upper layers, /usr's upper layer, /tmp, the home, the boot
 * id) and box.json, what the restore needs besides (host ids, limits, the
 * processes the gateway knows, the mounts that come from outside).
 *
 * A dump runs in a worker process, so that the loop goes on: `criu dump`
 * leaves the processes stopped (or running, for a checkpoint that keeps
 * the sandbox), then tar reads the top through the descriptor the
 * sandbox's setup handed us (sandbox.h's top_fd), and the directory is
 * renamed into place whole. A restore rebuilds the top on a new tmpfs in a
 * private mount namespace (the archive, the host's /usr idmapped through
 * the sandbox's ids, the two overlays named relative to it), then becomes
 * `criu restore --restore-sibling`, so that the restored init is our
 * child as a made one is, with a new report pipe in place of its old one
 * and its cgroups made by us beforehand with their limits.
 *
 * A checkpoint's memory pages, the bulk of it, are compressed with zstd
 * in the background a while after its dump (checkpoint_compact.c,
 * checkpoint_pages.c); a restore of a compressed one decompresses them
 * first, beside the checkpoint, which a restore never changes. */
#ifndef GLOVEBOX_CHECKPOINT_H
#define GLOVEBOX_CHECKPOINT_H

#include "protocol/hostmsg.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef void (*checkpoint_report_fn)(enum hostmsg_type type, json_t *body);

/* Finds CRIU (criu: a path, or a name looked up on PATH and in the sbin
 * directories) and checks it is 4.1 or newer, and takes dir (made 0700)
 * for checkpoints, whose pages are compressed compress_after seconds
 * after their dump (-1: never). When either cannot be, checkpoints are
 * off and checkpoint_available says why. */
void checkpoint_init(const char *criu, const char *dir, int compress_after);
/* Whether checkpoints can be made; else why (size bytes) says why not. */
bool checkpoint_available(char *why, size_t size);
/* CHECKPOINT, RESTORE and CHECKPOINT_DELETE from the gateway: each is
 * answered through report (CHECKPOINTED; SANDBOX_READY with the root or
 * SANDBOX_FAILED), possibly later, from checkpoint_reaped. link is the
 * gateway's socket, for an answer that carries a descriptor. */
void checkpoint_handle(enum hostmsg_type type, json_t *body, int link, checkpoint_report_fn report);
/* A child of ours ended: true when it was a checkpoint's worker (then
 * handled and answered). */
bool checkpoint_reaped(pid_t pid, int status, int link, checkpoint_report_fn report);
/* At the kernel-host's exit: a compaction under way is killed and its
 * half-written file removed, so that nothing is left half done. */
void checkpoint_compact_stop(void);

#endif
