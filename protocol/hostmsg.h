/* The interface between the gateway and the kernel-host: typed messages on
 * a SOCK_SEQPACKET socketpair, one datagram each, an 8-byte header (type,
 * body length) and a JSON body of at most HOSTMSG_MAX_BODY bytes. A body
 * past HOSTMSG_MAX_INLINE travels in a sealed memfd sent with the datagram
 * instead of in it: a socket's default buffer holds one datagram of ~200
 * KiB at most, and a command line may be 128 KiB before JSON escapes it.
 * Every body is validated field by field when decoded, so neither side ever
 * acts on a message it did not fully understand; the side that asks checks
 * a request against the same rules before sending it (hostmsg_start_check),
 * and the kernel-host answers one it refuses anyway, so that nothing waits
 * for an answer that never comes. This is all the two processes share. */
#ifndef GLOVEBOX_HOSTMSG_H
#define GLOVEBOX_HOSTMSG_H

#include "protocol/ids.h"
#include "protocol/share.h"
#include "protocol/sign.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

/* The bounds of a process's command line and environment. Linux refuses
 * an execve with one string of MAX_ARG_STRLEN (32 pages: 128 KiB) or more,
 * its NUL included, and all of them past a quarter of the stack limit (2
 * MiB under the usual 8 MiB); E2B's envd passes what it is given on to
 * execve. So one argument or "NAME=value" may be as long as Linux allows,
 * and all of them together half of what it allows, which is also all that
 * one E2B request (a Connect envelope of 1 MiB) can carry: whatever passes
 * here is never refused by execve for its size. */
#define HOSTMSG_MAX_STRING     (128 * 1024 - 1) /* bytes of one argument or env entry */
#define HOSTMSG_MAX_ARGS       4096             /* argv entries, the program's included */
#define HOSTMSG_MAX_ENV        1024             /* env entries */
#define HOSTMSG_MAX_EXEC_BYTES (1024 * 1024)    /* argv and env, each string with its NUL */
#define HOSTMSG_MAX_RO_PATHS   64               /* a sandbox's read-only binds */
/* A body: the largest START (HOSTMSG_MAX_EXEC_BYTES of strings that JSON
 * may escape six times over, "\u0001" for a byte, and the paths) fits. */
#define HOSTMSG_MAX_BODY (8 * 1024 * 1024)
/* Bodies up to this size travel in the datagram itself. */
#define HOSTMSG_MAX_INLINE (32 * 1024)
#define HOSTMSG_ERROR_SIZE 256

/* The kernel's socket for a channel (enum jp_channel) is <ipc_prefix>-<port>
 * with this port number; both sides rely on it. */
#define HOSTMSG_PORT(channel) ((int)(channel) + 1)
/* Every sandbox's sudo command (glovebox-sudo), which the gateway also runs
 * as the sandbox's root, with --serve, where sudo is offered. */
#define HOSTMSG_SUDO_COMMAND "/opt/glovebox/bin/sudo"

/* A sandbox holds the namespaces, mounts and cgroup; processes (kernels,
 * commands) run in it. Every object is named by a UUID the gateway picks. */
enum hostmsg_type {
        /* gateway -> kernel-host */
        HOSTMSG_SANDBOX_CREATE = 1,  /* struct hostmsg_sandbox */
        HOSTMSG_SANDBOX_DESTROY = 2, /* struct hostmsg_signal (id: the sandbox) */
        HOSTMSG_START = 3,           /* struct hostmsg_start: a process in a sandbox */
        HOSTMSG_SIGNAL = 4,          /* struct hostmsg_signal: to the process's group */
        HOSTMSG_STOP = 5,            /* struct hostmsg_signal: kill the process now */
        HOSTMSG_CONNECT = 6,         /* struct hostmsg_connect: a TCP connection into a sandbox */
        HOSTMSG_LAYER_DELETE = 7,    /* struct hostmsg_layer: a template layer's image goes */
        /* struct hostmsg_volume: a volume's filesystem, made first when
         * size_mb is not 0; answered by VOLUME_OPENED */
        HOSTMSG_VOLUME_OPEN = 8,
        HOSTMSG_VOLUME_DELETE = 9, /* struct hostmsg_volume: its image goes */
        /* struct hostmsg_signal (id: the sandbox; signal 1: in the
         * background, 0: not): a pooled sandbox's CPU weight, the least
         * until it is handed out, so that refills do not slow cells */
        HOSTMSG_SANDBOX_PRIORITY = 10,
        /* Memory checkpoints (kernel-host/checkpoint.h), each a struct
         * hostmsg_volume whose volume_id names the checkpoint:
         * CHECKPOINT (id: the sandbox) dumps the whole sandbox, its
         * processes left stopped, answered by CHECKPOINTED; RESTORE (id:
         * the new sandbox's) makes a sandbox of one, answered like
         * SANDBOX_CREATE; CHECKPOINT_DELETE removes one. */
        HOSTMSG_CHECKPOINT = 11,
        HOSTMSG_RESTORE = 12,
        HOSTMSG_CHECKPOINT_DELETE = 13,
        /* struct hostmsg_relimit: a sandbox's cgroup takes new limits (a
         * pooled sandbox handed to a request that named its own), answered
         * by RELIMITED */
        HOSTMSG_SANDBOX_RELIMIT = 14,
        /* kernel-host -> gateway */
        HOSTMSG_SANDBOX_READY = 100,  /* struct hostmsg_sandbox_ready */
        HOSTMSG_SANDBOX_FAILED = 101, /* struct hostmsg_failed */
        HOSTMSG_SANDBOX_GONE = 102,   /* struct hostmsg_exit: nothing more starts in it */
        HOSTMSG_STARTED = 103,        /* struct hostmsg_started (+ a command's stdio fds) */
        HOSTMSG_START_FAILED = 104,   /* struct hostmsg_failed */
        HOSTMSG_EXITED = 105,         /* struct hostmsg_exit */
        HOSTMSG_HELLO = 106,          /* struct hostmsg_hello: the first message, once */
        HOSTMSG_CONNECTED = 107,      /* struct hostmsg_connected (+ the socket when error 0) */
        /* struct hostmsg_layer: a build's sandbox is gone and its layer
         * read-only (error 0), ready for templates; or why not */
        HOSTMSG_LAYER_SEALED = 108,
        /* struct hostmsg_connected: error 0 and the volume's root directory
         * (O_PATH) comes along, or an errno */
        HOSTMSG_VOLUME_OPENED = 109,
        /* struct hostmsg_failed (id: the sandbox): error 0 once the
         * checkpoint is whole on disk, or what failed (the sandbox then
         * runs on) */
        HOSTMSG_CHECKPOINTED = 110,
        /* struct hostmsg_failed (id: the sandbox): error 0 once its cgroup
         * holds the new limits; EBUSY when it already uses more memory or
         * processes than they allow, EINVAL for another disk size (its
         * limits then stay as they were) */
        HOSTMSG_SANDBOX_RELIMITED = 111,
};

/* a command's stdin (write end), stdout, stderr (read ends); or a
 * terminal's master */
#define HOSTMSG_MAX_FDS 3

struct hostmsg_limits {
        uint64_t memory_mb;
        uint32_t cpu_millis; /* 1000 = one CPU */
        uint32_t pids;
        uint64_t disk_mb;
};

static inline bool hostmsg_limits_equal(const struct hostmsg_limits *a,
                                        const struct hostmsg_limits *b)
{
        return a->memory_mb == b->memory_mb && a->cpu_millis == b->cpu_millis &&
               a->pids == b->pids && a->disk_mb == b->disk_mb;
}

/* A sandbox's egress, already within the operator's policy (the gateway
 * checked the request against it): rules as protocol/egress.h words. */
struct hostmsg_network {
        bool enabled;             /* false: no network at all (loopback only) */
        char **allow;             /* NULL-terminated; owned after decoding */
        char **deny;              /* always wins over allow */
        char dns[64];             /* upstream resolver "A.B.C.D" or "A.B.C.D#PORT" */
        uint32_t rate_kib;        /* KiB/s each way; 0: no cap */
        uint32_t max_connections; /* at once; 0: no cap */
        /* The operator's own allowed blocks (--egress-allow), whatever the
         * request narrowed allow to: one inside a block no sandbox reaches
         * by default (kernel-host/net.c's: private, shared, reserved) opens
         * it, for addresses and for names answering there. NULL: none. */
        char **opened;
};

/* The cgroup controller each limit needs; a bit of hostmsg_hello's
 * controllers for each the kernel-host can use. disk_mb needs none (it is
 * the size of the sandbox's tmpfs). */
enum hostmsg_controller {
        HOSTMSG_CONTROLLER_MEMORY = 1 << 0, /* memory_mb */
        HOSTMSG_CONTROLLER_PIDS = 1 << 1,   /* pids */
        HOSTMSG_CONTROLLER_CPU = 1 << 2,    /* cpu_millis */
};

/* What the kernel-host can do, told once as it starts. */
struct hostmsg_hello {
        unsigned controllers; /* enum hostmsg_controller bits: the limits it enforces */
        /* Memory checkpoints (CHECKPOINT, RESTORE) can be made; else
         * checkpoint_off says why, in words for the operator. */
        bool checkpoints;
        char checkpoint_off[HOSTMSG_ERROR_SIZE];
};

struct hostmsg_sandbox {
        char sandbox_id[JP_UUID_SIZE];
        struct hostmsg_limits limits;
        struct hostmsg_network network;
        char **ro_paths; /* host paths bound read-only at the same path; owned after decoding */
        bool sandbox;    /* false: --sandbox=none, a plain directory */
        /* A template's tree, the sandbox's root under an overlay; "" for
         * the host's /usr. Absolute, without ',', ':' or '\\'. */
        char template_root[PATH_MAX];
        /* A built template's layers (kernel-host/layers.h), top first, over
         * template_root's tree or the host's /usr: ids (UUIDs) of images
         * in the kernel-host's layers directory. NULL-terminated, at most
         * HOSTMSG_MAX_LAYERS; owned after decoding; NULL: none. */
        char **layers;
        /* A template build: every change to the sandbox's root (its home
         * included, /tmp not) lands in a new layer of this id, an image of
         * build_layer_mb MiB, sealed read-only when the sandbox ends. ""
         * for none. */
        char build_layer[JP_UUID_SIZE];
        uint64_t build_layer_mb;
        /* Volumes (kernel-host/volumes.h) mounted read-write: "UUID:/path",
         * the path absolute and plain (hostmsg_volume_mount_valid).
         * NULL-terminated, at most HOSTMSG_MAX_VOLUMES; owned after
         * decoding; NULL: none. */
        char **volumes;
        /* The tenant a sandbox made ahead would be taken for
         * (protocol/share.h): its name when the gateway has more than one,
         * "" otherwise. Letters, digits, '_', '.', '-'. */
        char tenant[JP_SHARE_NAME_SIZE];
};

#define HOSTMSG_MAX_LAYERS  16
#define HOSTMSG_MAX_VOLUMES 8

struct hostmsg_volume {
        char id[JP_UUID_SIZE];        /* the request's, named again in the answer */
        char volume_id[JP_UUID_SIZE]; /* names its image */
        uint64_t size_mb;             /* OPEN: 0 opens an existing one; else made first */
        /* CHECKPOINT: at most this many MiB on disk, else refused with
         * EFBIG and nothing kept (0: no bound) */
        uint64_t room_mb;
        /* RESTORE: a copy of the checkpointed sandbox beside it (a fork),
         * with host ids of its own and each process's id derived from
         * this sandbox's (jp_uuid_derive(id, old id)) */
        bool copy;
};

struct hostmsg_layer {
        char id[JP_UUID_SIZE];
        int error; /* LAYER_SEALED: 0, or the errno of what failed */
};

struct hostmsg_sandbox_ready {
        char sandbox_id[JP_UUID_SIZE];
        int init_pid;      /* host pid of the sandbox's init (0 without a sandbox) */
        unsigned user_uid; /* host ids of the sandbox's "user": what the gateway */
        unsigned user_gid; /* writes into the sandbox belongs to them */
        /* host ids of the sandbox's own root (uid 0 inside, never host
         * root): has_root false when it has none (an unprivileged
         * kernel-host maps only "user"; --sandbox=none) */
        bool has_root;
        unsigned root_uid, root_gid;
        char root[PATH_MAX]; /* host path of the sandbox's root directory */
        /* The name of its cgroup, when it is not sandbox_id (a sandbox made
         * ahead, on cgroup v2, keeps the one it was made with): letters,
         * digits and '-'. "": sandbox_id. */
        char cgroup[JP_UUID_SIZE];
        /* A restored sandbox's egress, as its checkpoint kept it (enabled
         * false: none, or not a restore); owned after decoding: release
         * with hostmsg_sandbox_ready_clear. */
        struct hostmsg_network network;
        /* A restored sandbox's volumes, "id:/path" as at its creation
         * (NULL: none); owned after decoding. */
        char **volumes;
};

struct hostmsg_start {
        char id[JP_UUID_SIZE];
        char sandbox_id[JP_UUID_SIZE];
        bool kernel; /* a kernel: a connection file is written */
        /* kernels: it binds TCP only (ijavascript, tslab): its connection
         * file names loopback ports, and glovebox-kernel-bridge joins them
         * to the ipc sockets the gateway uses */
        bool tcp_bridge;
        /* kernels: the kernelspec's name when the operator gave it a
         * zygote (--zygote); the kernel-host forks the kernel from it when
         * it can, else starts it cold. "" for none. */
        char zygote[64];
        char kernelspec_dir[PATH_MAX]; /* kernels: expands "{resource_dir}" */
        char key[JP_MAX_KEY_LEN + 1];  /* kernels: the HMAC key */
        char cwd[PATH_MAX];            /* inside the sandbox; "" for the home directory */
        /* commands: a new session on a pseudo-terminal of the sandbox's
         * own devpts, its controlling terminal; STARTED then carries one
         * descriptor, the terminal's master, instead of three pipes */
        bool pty;
        uint16_t rows, cols; /* pty: the terminal's first size (0: 24 by 80) */
        /* commands: runs as the sandbox's own root (uid 0 of its user
         * namespace) with file-ownership capabilities only, not as "user" */
        bool as_root;
        char **argv; /* NULL-terminated; owned after decoding */
        char **env;  /* "NAME=value", NULL-terminated; owned after decoding */
};

struct hostmsg_started {
        char id[JP_UUID_SIZE];
        int pid; /* host pid of the process */
        /* kernels: the sockets are <prefix>-<port>; in a sandbox a path
         * relative to the sandbox's root (the root_fd of SANDBOX_READY), else
         * an absolute host path */
        char ipc_prefix[PATH_MAX];
};

struct hostmsg_failed {
        char id[JP_UUID_SIZE];
        char step[64]; /* which step failed, e.g. "exec" */
        int error;     /* errno of that step */
        char message[HOSTMSG_ERROR_SIZE];
        /* CHECKPOINTED with error 0: what the checkpoint took on disk as
         * dumped, before its pages are compressed (0: not said) */
        uint64_t bytes;
};

struct hostmsg_signal {
        char id[JP_UUID_SIZE];
        int signal; /* SIGNAL only; 0 otherwise */
};

struct hostmsg_relimit {
        char id[JP_UUID_SIZE]; /* the sandbox */
        struct hostmsg_limits limits;
};

/* A TCP connection to the sandbox's own loopback (127.0.0.1:port in its
 * network namespace, nothing else), for the gateway's port proxy. */
struct hostmsg_connect {
        char id[JP_UUID_SIZE]; /* the request's, named again in the answer */
        char sandbox_id[JP_UUID_SIZE];
        int port; /* 1-65535 */
};

struct hostmsg_connected {
        char id[JP_UUID_SIZE];
        int error; /* 0: connected, the socket comes along; else an errno (ECONNREFUSED...) */
};

struct hostmsg_exit {
        char id[JP_UUID_SIZE];
        int pid;
        int exit_code; /* -1 when killed by a signal */
        int signal;    /* 0 when it exited */
        /* "exited", "signaled", "out-of-memory", "sandbox-died" (its
         * sandbox's init died, and the sandbox was reported gone first);
         * the gateway itself makes "host-lost" */
        char reason[32];
};

/* Sends one message, with up to HOSTMSG_MAX_FDS descriptors (SCM_RIGHTS);
 * 0 or -errno (-EMSGSIZE past HOSTMSG_MAX_BODY). A body past
 * HOSTMSG_MAX_INLINE goes in a sealed memfd, which the receiver reads. */
int hostmsg_send(int fd, enum hostmsg_type type, json_t *body, const int *fds, size_t nfds);
/* Receives one message: 0 with *body set (caller decrefs) and the
 * descriptors that came with it in fds (close-on-exec, *nfds of them; pass
 * NULL to close any), -EAGAIN when none is waiting, -EPIPE when the peer is
 * gone, -EBADMSG for a malformed or oversized one (which is consumed). */
int hostmsg_recv(int fd, enum hostmsg_type *type, json_t **body, int *fds, size_t *nfds);

json_t *hostmsg_hello_encode(const struct hostmsg_hello *m);
int hostmsg_hello_decode(json_t *body, struct hostmsg_hello *m);
/* The controller's name ("memory", "pids", "cpu"), or NULL. */
const char *hostmsg_controller_name(enum hostmsg_controller c);
json_t *hostmsg_sandbox_encode(const struct hostmsg_sandbox *m);
/* A sandbox's network as the sandbox request carries it (also kept in a
 * memory checkpoint's record); decoding validates every rule, and on
 * success n owns its lists: release with hostmsg_network_clear. */
json_t *hostmsg_network_encode(const struct hostmsg_network *n);
int hostmsg_network_decode(json_t *o, struct hostmsg_network *n);
void hostmsg_network_clear(struct hostmsg_network *n);
/* On success m owns ro_paths and layers; release with hostmsg_sandbox_clear. */
int hostmsg_sandbox_decode(json_t *body, struct hostmsg_sandbox *m);
void hostmsg_sandbox_clear(struct hostmsg_sandbox *m);
json_t *hostmsg_sandbox_ready_encode(const struct hostmsg_sandbox_ready *m);
int hostmsg_sandbox_ready_decode(json_t *body, struct hostmsg_sandbox_ready *m);
void hostmsg_sandbox_ready_clear(struct hostmsg_sandbox_ready *m);
json_t *hostmsg_start_encode(const struct hostmsg_start *m);
/* On success m owns argv and env; release with hostmsg_start_clear. */
int hostmsg_start_decode(json_t *body, struct hostmsg_start *m);
void hostmsg_start_clear(struct hostmsg_start *m);
/* Whether m is a START its decoder accepts: within the bounds above
 * (-E2BIG) and of the right shape (-EINVAL: no argv, an env entry without
 * '=', a relative cwd). 0, or the error with why (when not NULL) saying
 * which bound or rule, in words for the user who asked. The gateway checks
 * every request with it before sending; the decoder applies it too. */
int hostmsg_start_check(const struct hostmsg_start *m, char *why, size_t size);
/* The request id a refused request named (its "id", or "sandbox_id" for
 * SANDBOX_CREATE) when it is a valid one, so that the refusal can be
 * answered: 0, or -EBADMSG when there is none to answer. */
int hostmsg_request_id(json_t *body, const char *key, char id[JP_UUID_SIZE]);
json_t *hostmsg_started_encode(const struct hostmsg_started *m);
int hostmsg_started_decode(json_t *body, struct hostmsg_started *m);
json_t *hostmsg_failed_encode(const struct hostmsg_failed *m);
int hostmsg_failed_decode(json_t *body, struct hostmsg_failed *m);
json_t *hostmsg_signal_encode(const struct hostmsg_signal *m);
int hostmsg_signal_decode(json_t *body, struct hostmsg_signal *m);
json_t *hostmsg_relimit_encode(const struct hostmsg_relimit *m);
int hostmsg_relimit_decode(json_t *body, struct hostmsg_relimit *m);
json_t *hostmsg_connect_encode(const struct hostmsg_connect *m);
int hostmsg_connect_decode(json_t *body, struct hostmsg_connect *m);
json_t *hostmsg_connected_encode(const struct hostmsg_connected *m);
int hostmsg_connected_decode(json_t *body, struct hostmsg_connected *m);
json_t *hostmsg_exit_encode(const struct hostmsg_exit *m);
int hostmsg_exit_decode(json_t *body, struct hostmsg_exit *m);
json_t *hostmsg_layer_encode(const struct hostmsg_layer *m);
int hostmsg_layer_decode(json_t *body, struct hostmsg_layer *m);
json_t *hostmsg_volume_encode(const struct hostmsg_volume *m);
int hostmsg_volume_decode(json_t *body, struct hostmsg_volume *m);
/* A volume's mount point: absolute, at most 255 bytes, of components that
 * are neither "." nor "..", not "/" itself and not in what every sandbox
 * has of its own (/proc, /dev, /sys, /run, /etc, /usr, /bin, /sbin,
 * /lib*, /opt/glovebox, /tmp and /home/user themselves). */
bool hostmsg_volume_path_valid(const char *path);
/* "UUID:/path" with a valid path: the id into id (JP_UUID_SIZE), the path
 * into *path (pointing into mount). */
bool hostmsg_volume_mount_split(const char *mount, char *id, const char **path);

#endif
