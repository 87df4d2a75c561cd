/* The planning of a sandbox's root (rootfs.c), shared with the part of it
 * in rootfs_special.c: its /proc and /dev. */
#ifndef GLOVEBOX_ROOTFS_PLAN_H
#define GLOVEBOX_ROOTFS_PLAN_H

#include "kernel-host/rootfs_ops.h"

/* On the sandbox's tmpfs, beside its root. The file that becomes its
 * /proc/sys/kernel/random/boot_id. */
#define BOOT_ID_FILE "boot_id"
/* The empty directory bound read-only over each masked /proc directory.
 * One tmpfs per directory did the same, but CRIU archives and unpacks
 * each tmpfs of a sandbox on its own (about 8 ms of every pause and
 * resume for the five a host has); a bind of the tmpfs the checkpoint
 * archives anyway costs nothing. */
#define MASK_DIR "masked"
/* The directories bound at /dev and /dev/shm, under the sandbox's disk
 * limit (tmpfs of their own where the sandbox has no tmpfs root). CRIU
 * archived and unpacked the two tmpfs at every pause and resume, about
 * 11 ms of each. */
#define DEV_DIR "dev"
#define SHM_DIR "shm"

/* Appends a step to p's plan: 0 or -ENOMEM. */
int rootfs_add_op(struct rootfs *p, enum op_kind kind, const char *target, const char *source,
                  const char *data, unsigned long flags, unsigned options, const char *step);
/* The flags a read-only remount of a bind of source must keep. */
unsigned long rootfs_locked_flags(const char *source);
/* /proc's host-wide files and directories masked, and the sandbox's own
 * boot id. */
int rootfs_plan_proc_masks(struct rootfs *p);
/* /dev: its device nodes, a private devpts, /dev/shm and the links. */
int rootfs_plan_dev(struct rootfs *p);

#endif
