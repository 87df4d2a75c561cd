/* Restart and keep (SIGUSR2): the record of the kernels a gateway hands
 * over to the next image of itself, in $STATE_DIR/kernels.json (0600),
 * and their re-adoption. The record holds HMAC keys: it is written only
 * for the exec, read once and removed. */
#ifndef GLOVEBOX_KEEP_H
#define GLOVEBOX_KEEP_H

#include <jansson.h>
#include <limits.h>

/* What the next image inherits besides the kernels. */
struct keep_process {
        char runtime_dir[PATH_MAX];
        int lock_fd; /* the runtime directory's lock */
        int host_fd; /* the link to the kernel-host */
        int host_pid;
        unsigned controllers; /* the kernel-host's hello */
};

/* What a family keeps of its own across the restart beside the kernels
 * (Jupyter's sessions): record() gives it as JSON (a new reference, the
 * caller's; NULL: out of memory) under name in the record, and adopt()
 * takes it back once the kernels are re-adopted. */
struct keep_part {
        const char *name;
        json_t *(*record)(void);
        void (*adopt)(json_t *saved);
};

#define KEEP_MAX_PARTS 4

/* Registers part (kept by pointer) before any save or adopt: 0, or -ENOSPC
 * past KEEP_MAX_PARTS. */
int keep_register(const struct keep_part *part);

/* Writes the record of proc, of every kernel that can be kept
 * (kernels_keep_record) and of every registered part to
 * state_dir/kernels.json. 0 or -errno. */
int keep_save(const char *state_dir, const struct keep_process *proc);
/* Reads and removes the record: proc, and *record (the caller's, for
 * keep_adopt). 0, -ENOENT (none), -EPERM (not ours) or -EBADMSG. */
int keep_load(const char *state_dir, struct keep_process *proc, json_t **record);
/* Removes a record no gateway will take over: at a fresh start (left by
 * a gateway that is gone), or after an exec that failed. */
void keep_discard_stale(const char *state_dir);
/* Takes over every recorded kernel (what cannot be is killed), then the
 * sessions of those kept. Needs the loop and the kernel-host link. */
void keep_adopt(json_t *record);

#endif
