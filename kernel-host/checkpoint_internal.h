/* What the two halves of the kernel-host's checkpoints share
 * (checkpoint.h): checkpoint.c makes them and answers the gateway,
 * checkpoint_restore.c makes sandboxes of them. Nothing else includes
 * this. */
#ifndef GLOVEBOX_CHECKPOINT_INTERNAL_H
#define GLOVEBOX_CHECKPOINT_INTERNAL_H

#include "kernel-host/checkpoint.h"
#include "kernel-host/overlay.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/spawn_internal.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#define RECORD  "box.json"
#define ARCHIVE "files.tar"
/* A disk home's files (homedisk.h), beside the top's, and where the
 * restore's worker mounts the new one, in the rebuilt top. */
#define HOME_ARCHIVE "home.tar"
#define HOME_DISK    "home-disk"
#define RECORD_MAX   (1 << 20)
#define MAX_MOUNTS   256
#define MAX_PROCS    64
/* Files of mounts outside the sandbox (checkpoint_files.c) in one. */
#define CHECKPOINT_MAX_FOREIGN 1024
#define MAX_ARGS               (2 * MAX_MOUNTS + 6 * MAX_PROCS + 2 * CHECKPOINT_MAX_FOREIGN + 64)
/* In criu restore: the new report pipe's write end, handed to init. */
#define REPORT_FD 10
/* The merged /usr of a rebuilt top, beside its layers. */
#define USR_MERGED "usr-merged"
#define LOG_TAIL   200
/* The restore's worker found the checkpoint not as sealed. */
#define RESTORE_TAMPERED 118
/* The restore's worker could not decompress the checkpoint's pages. */
#define RESTORE_PAGES 117
/* Each page file's size as the dump wrote it (checkpoint_pages.c). */
#define CHECKPOINT_PAGES_RECORD "pages.json"

/* CRIU's program, and the directory of checkpoints (-1: they are off). */
extern char checkpoint_criu[PATH_MAX];
extern char checkpoint_dir[PATH_MAX];
extern int checkpoint_dir_fd;

/* A dump or restore under way: its worker is our child. */
struct job {
        struct job *next;
        pid_t pid; /* the worker (a dump) or criu itself (a restore) */
        bool restore;
        bool kill_after;  /* a pause: the stopped sandbox is killed once saved */
        uint64_t room_mb; /* a dump's bound on disk (0: none) */
        /* The sandbox's egress slot at the dump (-1: none), which a dump
         * that leaves it running, and its restore, ask for again. */
        int net_slot;
        /* a restore's egress (enabled: the sandbox had it), and its
         * /etc/resolv.conf, written before the sandbox runs again */
        struct hostmsg_network network;
        char resolv[64];
        /* a restore's volumes: "id:/path" for the sandbox, and each one's
         * new mount (idmapped for the sandbox), handed to CRIU */
        char **volumes;
        int volume_fds[OVERLAY_MAX_VOLUMES];
        size_t nvolumes;
        int home_fd;                  /* a restore's new disk home (a detached mount); -1: none */
        char template_root[PATH_MAX]; /* a restore's template tree; "": the host's /usr */
        /* a restore's built template's layers (top first), mounted again,
         * and its overlays' options as recorded ("": as rootfs.c makes
         * them without layers) */
        json_t *layers;
        int layer_fds[OVERLAY_MAX_LAYERS];
        size_t nlayers;
        char root_data[2 * PATH_MAX], usr_data[2 * PATH_MAX];
        /* a restore's files of mounts outside the sandbox, opened again
         * (checkpoint_files.c), each with CRIU's name for it */
        struct {
                int fd;
                char key[48];
        } foreign[CHECKPOINT_MAX_FOREIGN];
        size_t nforeign;
        char home_archive[PATH_MAX + 80];
        /* a restore's as a copy (a fork): its ids are new, old_ids the
         * checkpoint's */
        bool copy;
        struct sandbox_ids old_ids;
        /* a restore's images in a directory of its own in the
         * checkpoint's, copy-<sandbox id>: a copy's, or one whose pages
         * are compressed (they are decompressed there) */
        bool own_images;
        char dir[PATH_MAX + 64]; /* a restore's checkpoint */
        char sandbox_id[JP_UUID_SIZE];
        char name[JP_UUID_SIZE];
        int msg_fd; /* what failed, from the worker */
        /* a restore's */
        struct box *box;
        int report_rd, top_sock;
        struct sandbox_ids ids;
        struct hostmsg_limits limits;
        struct kernel_cgroup cgroup;
        json_t *flags; /* {mount point: options} at the dump */
        size_t nprocs;
        struct {
                char id[JP_UUID_SIZE];
                /* its group's name: p-<its id at the dump>, as CRIU puts
                 * it back (a copy's process has a new id, not a new group) */
                char group[JP_UUID_SIZE + 8];
                pid_t nspid;
                bool kernel;
                struct kernel_cgroup cgroup;
                /* A command's stdin, stdout and stderr at the dump (pipe
                 * inodes, 0: none), and the new pipes in their place: the
                 * sandbox's ends, for criu's --inherit-fd until it ends,
                 * and the gateway's, sent once the sandbox is back. */
                ino_t pipes[3];
                int inside[3], outside[3];
                /* A command's terminal at the dump (the peer's device and
                 * devpts instance; 0: none): a new pair stands for it, the
                 * peer in inside[0], the master, the gateway's, in
                 * outside[0]. */
                unsigned long long tty[2];
        } procs[MAX_PROCS];
};

/* checkpoint.c. A new job in the list (NULL: out of memory), and its end. */
struct job *checkpoint_job_new(const char *sandbox_id, const char *name);
void checkpoint_job_free(struct job *j);
/* Whether a restore of checkpoint name is under way. */
bool checkpoint_restoring(const char *name);
/* Runs argv (execvp) in dir_fd (-1: here), stdio on /dev/null, and waits:
 * 0, or -1. In a worker only. */
int checkpoint_run(char *const argv[], int dir_fd);

/* checkpoint_netns.c. Waits (at most half a second) until every
 * connected Unix socket in the network namespace netns_fd has its peer
 * there too: the gateway's connections, closed before the dump, closed at
 * the kernel's end as well. In the dump's worker. */
void checkpoint_await_unix_peers(int netns_fd);
/* glovebox-criu-action beside the kernel-host, which criu runs as its
 * action script for a namespace the dump left out ("" when there is none:
 * dumps then keep the namespace), found once at start. */
#define ACTION_PROGRAM "glovebox-criu-action"
extern char checkpoint_action[];
void checkpoint_netns_init(void);

/* checkpoint_mounts.c. One line of a mountinfo, as read. */
struct mount_line {
        int id;
        unsigned major, minor;
        char root[PATH_MAX];
        char point[PATH_MAX];
        char fstype[64];
        char options[1024]; /* the filesystem's ("" when the line has none) */
};
/* Reads line into m; false for one we cannot read whole or that names a
 * path with an escape (a space, a newline). */
bool checkpoint_mount_parse(char *line, struct mount_line *m);

/* checkpoint_kdat.c. criu runs with a /run where it can keep what it
 * learns of the kernel, and its cgroup yard: made once at start; in
 * criu's own process, a clone of it for argv (-1: none) taken before
 * anything else, then entered at the exec of argv, a dump or restore told
 * of the yard (own_namespace: the process has a mount namespace of its
 * own already). */
void checkpoint_kdat_init(void);
int checkpoint_kdat_clone(char *const argv[]);
__attribute__((noreturn)) void checkpoint_kdat_exec(char *const argv[], int clone,
                                                    bool own_namespace);
/* The first line of a CRIU log in dir_fd that says "Error" and is not one
 * it carries on from, into out ("" when none). */
void checkpoint_log_error(int dir_fd, const char *file, char *out, size_t size);

/* checkpoint_restore.c. Reads RECORD in dir_fd (the caller decrefs). 0 or
 * -EBADMSG. */
int checkpoint_read_record(int dir_fd, json_t **out);
/* o's key as a number in [0, max]. */
bool checkpoint_json_uint(json_t *o, const char *key, unsigned long long max,
                          unsigned long long *out);
/* Starts restoring checkpoint req->volume_id as sandbox req->id: 0 and the
 * job runs, or -errno with step and err set. */
int checkpoint_restore_start(const struct hostmsg_volume *req, char *step, size_t stepsize,
                             char *err, size_t errlen);
/* The restore's criu ended with status: the sandbox answered to the
 * gateway, ready or failed. */
void checkpoint_restore_reaped(struct job *j, int status, int link, checkpoint_report_fn report);

/* checkpoint_mounts.c. The mounts of the sandbox of init that CRIU must be
 * told come from outside, as [{"point", "key", "kind", "path"}]: "top" (a
 * bind of the top's path), "usr" (the /usr overlay), "volume" (one of
 * volumes, "id:/path": path is its id), "home" (its disk home, when
 * disk_home: its files go in HOME_ARCHIVE) or "host" (a host path); its own
 * tmpfs, proc, devpts and mqueue CRIU saves itself. NULL with err set
 * when one is of a kind we cannot restore. */
json_t *checkpoint_outside_mounts(pid_t init, int top_fd, char *const *volumes, bool disk_home,
                                  char *err, size_t errlen);
/* Every mount's options, {point: options}, for the restore; NULL when
 * they cannot be read. */
json_t *checkpoint_mount_flags(pid_t init);
/* The options of init's overlays (root and /usr), {point: options}, and
 * whether recorded ones are as rootfs.c makes them (known options, every
 * directory relative to the top); each layer (ids) mounted again for j,
 * read-only, idmapped through holder's user namespace, into j's
 * layer_fds: 0 or -errno with err set. */
json_t *checkpoint_overlays(pid_t init);
bool checkpoint_overlay_data_ok(const char *data);
int checkpoint_layers_take(struct job *j, json_t *layers, pid_t holder, char *err, size_t errlen);
/* checkpoint_files.c. The files the processes of the sandbox of init map
 * or hold open from mounts that are not the sandbox's (a zygote's
 * kernel's: zygote.h), as {CRIU's key: {"path", "ino", "size", "mtime"}},
 * for --external; NULL with err set when one cannot be kept (not a
 * regular file, no path, too many). At a restore, each opened again from
 * its host path into j's foreign, checked to be the same file (-ESTALE,
 * err set, when it is not), for --inherit-fd. */
json_t *checkpoint_foreign_files(pid_t init, char *err, size_t errlen);
int checkpoint_foreign_open(struct job *j, json_t *files, char *err, size_t errlen);
/* In the restore's worker, in the rebuilt top: the layers and overlays as
 * the sandbox had them. 0, or the worker's exit status for what failed. */
int checkpoint_lay_overlays(const struct job *j, int usr_fd);
/* At a restore: each volume of the record's mounts mounted again for j,
 * idmapped through holder's user namespace (j's ids), into j's
 * volume_fds and volumes ("id:/path"); and its disk home (a "home"), a
 * new one in j's home_fd for the worker to fill from HOME_ARCHIVE in
 * checkpoint directory dir_fd. 0, or -errno with err set. */
int checkpoint_volumes_take(struct job *j, json_t *mounts, pid_t holder, char *err, size_t errlen);
int checkpoint_home_take(struct job *j, json_t *mounts, int dir_fd, char *err, size_t errlen);
/* Gives every mount of restored sb at least the flags recorded at the
 * dump (only tightening, whatever a path leads to). 0, or -EPERM. */
int checkpoint_restore_flags(const struct sandbox *sb, json_t *recorded);

/* checkpoint_manifest.c: what a restore trusts, sealed at the dump. The
 * kernel-host's key, read from (or made in) the checkpoints' directory:
 * 0 or -errno. The manifest of checkpoint directory dir_fd, written last
 * (in the dump's worker): 0 or -EIO. Whether dir_fd's files are exactly
 * as sealed (in the restore's worker): 0, or -EBADMSG. */
int checkpoint_key_init(int dir_fd);
int checkpoint_manifest_write(int dir_fd);
/* The manifest written, then every file and the directory made durable,
 * the images 0644 and the directory 0711 (see sync_dir): 0 or -EIO. */
int checkpoint_seal(int dir_fd);
int checkpoint_manifest_check(int dir_fd);
/* The same for one file of it (box.json, before the restore reads it). */
int checkpoint_manifest_check_file(int dir_fd, const char *name);

/* checkpoint_copy.c: a copy (a fork) under host ids of its own. The
 * images of checkpoint directory src into dst_fd: symlinks, but for the
 * user namespace's, rewritten from from's ids to to's. 0 or -errno
 * (-EBADMSG: an image that is not as we made it). */
int checkpoint_copy_images(const char *src, int dst_fd, const struct sandbox_ids *from,
                           const struct sandbox_ids *to);
/* The files under top (just unpacked, nothing of the sandbox running)
 * owned by from's ids become to's. 0 or -1. In the restore's worker. */
int checkpoint_copy_owners(const char *top, const struct sandbox_ids *from,
                           const struct sandbox_ids *to);
/* A restore's own image directory, copy-<sandbox_id> in checkpoint
 * directory dir (dir, size bytes, becomes its path): the checkpoint's
 * images as relative symlinks, which CRIU, reading some as the sandbox's
 * ids, follows without passing the state directory above; its user
 * namespace's rewritten from from's ids to to's (the same for a restore
 * that is not a copy). One a dead kernel-host left there goes first.
 * 0 or -errno. Its removal, once CRIU is done with it: checkpoint_fd is
 * the directory of checkpoints, name the checkpoint's. */
int checkpoint_images_dir(char *dir, size_t size, const char *sandbox_id,
                          const struct sandbox_ids *from, const struct sandbox_ids *to);
void checkpoint_images_dir_remove(int checkpoints_fd, const char *name, const char *sandbox_id);

/* checkpoint_pages.c: a checkpoint's memory pages, compressed or not. The
 * forms of a page file's name; base (size bytes) gets pages-N.img. */
enum checkpoint_pages_form {
        PAGES_NOT,        /* not a page file */
        PAGES_PLAIN,      /* pages-N.img, as CRIU wrote it */
        PAGES_COMPRESSED, /* pages-N.img.zst, whole */
        PAGES_PARTIAL,    /* pages-N.img.zst.tmp, being written (or a dead compaction's) */
};
enum checkpoint_pages_form checkpoint_pages_form(const char *name, char *base, size_t size);
/* At the dump, before the seal (which makes it durable):
 * CHECKPOINT_PAGES_RECORD, the size of every pages-N.img of dir_fd. 0 or
 * -EIO. */
int checkpoint_pages_record(int dir_fd);
/* That record, {name: size} (the caller decrefs); NULL when there is
 * none or it is malformed. */
json_t *checkpoint_pages_sizes(int dir_fd);
/* base (a pages-N.img of dir_fd of the recorded size, else -ESTALE and it
 * is left alone) replaced by base.zst, durably, unless that saves less
 * than an eighth (then it is kept, marked so); every recorded one: 0 or
 * the first -errno. */
int checkpoint_pages_compress(int dir_fd, const char *base, uint64_t size);
int checkpoint_pages_compress_all(int dir_fd);
/* Whether dir_fd has a recorded page file not compressed yet (nor found
 * not worth it); whether it has one compressed only (a restore must
 * decompress it). */
bool checkpoint_pages_pending(int dir_fd);
bool checkpoint_pages_compressed(int dir_fd);
/* Removes every pages-N.img.zst.tmp of dir_fd. */
void checkpoint_pages_remove_partial(int dir_fd);
/* In the restore's worker: each page file of checkpoint dir_fd that is
 * compressed only, decompressed into image directory images_fd to
 * exactly its recorded size. 0, or -EBADMSG (not as recorded, corrupt)
 * or -errno; nothing of a failed file is left. _for: into sandbox_id's
 * restore's (checkpoint_images_dir). */
int checkpoint_pages_expand(int dir_fd, int images_fd);
int checkpoint_pages_expand_for(int dir_fd, const char *sandbox_id);

/* checkpoint_compact.c: compaction in the background, each checkpoint
 * seconds after it is queued (-1: never). At start: leftovers of a dead
 * kernel-host removed, every checkpoint with plain pages queued. Queued:
 * name, unless its pages are all compressed. Cancelled: name's compaction
 * killed and waited for, or taken off the queue. Reaped: true when pid was
 * a compaction's child. (Stopped: checkpoint.h.) */
void checkpoint_compact_init(int seconds);
void checkpoint_compact_queue(const char *name);
void checkpoint_compact_cancel(const char *name);
bool checkpoint_compact_reaped(pid_t pid, int status);

/* checkpoint_streams.c: commands' pipes and terminals through a
 * checkpoint. At the dump: what rec (a process's record) keeps of p's,
 * and the --external arguments naming b's terminals (0, or -errno with
 * err filled). At the restore: the record's streams of process i taken
 * (0 or -EBADMSG), new ones made with their --inherit-fd arguments (0 or
 * -errno), and the gateway's ends handed over once p runs again. */
void checkpoint_streams_record(const struct proc *p, json_t *rec);
int checkpoint_streams_dump_args(const struct box *b, char **argv, size_t *argc, char **owned,
                                 size_t *nowned, char *err, size_t errlen);
int checkpoint_streams_take(json_t *rec, struct job *j, size_t i);
int checkpoint_streams_make(struct job *j, char **argv, size_t *argc, char **owned, size_t *nowned);
void checkpoint_streams_hand_over(struct job *j, size_t i, struct proc *p, int link);

#endif
