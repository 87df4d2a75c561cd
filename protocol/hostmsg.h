/* The interface between the gateway and the kernel-host: typed messages on
 * a SOCK_SEQPACKET socketpair, one datagram each, an 8-byte header (type,
 * body length) and a JSON body of at most HOSTMSG_MAX_BODY bytes. Every body
 * is validated field by field when decoded, so neither side ever acts on a
 * message it did not fully understand. This is all the two processes share. */
#ifndef GLOVEBOX_HOSTMSG_H
#define GLOVEBOX_HOSTMSG_H

#include "protocol/ids.h"
#include "protocol/sign.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define HOSTMSG_MAX_BODY    (256 * 1024)
#define HOSTMSG_MAX_ARGS    64
#define HOSTMSG_MAX_ENV     256
#define HOSTMSG_MAX_STRING  4096
#define HOSTMSG_ERROR_SIZE  256

/* The kernel's socket for a channel (enum jp_channel) is <ipc_prefix>-<port>
 * with this port number; both sides rely on it. */
#define HOSTMSG_PORT(channel) ((int)(channel) + 1)

enum hostmsg_type {
        /* gateway -> kernel-host */
        HOSTMSG_START = 1,  /* struct hostmsg_start */
        HOSTMSG_SIGNAL = 2, /* kernel_id, signal: deliver to the kernel's process group */
        HOSTMSG_STOP = 3,   /* kernel_id: kill everything of this kernel and clean up */
        /* kernel-host -> gateway */
        HOSTMSG_STARTED = 100,      /* kernel_id, pid, ipc_prefix */
        HOSTMSG_START_FAILED = 101, /* kernel_id, step, error (errno), message */
        HOSTMSG_EXITED = 102,       /* struct hostmsg_exit */
};

struct hostmsg_limits {
        uint64_t memory_mb;
        uint32_t cpu_millis; /* 1000 = one CPU */
        uint32_t pids;
        uint64_t disk_mb;
};

struct hostmsg_start {
        char kernel_id[JP_UUID_SIZE];
        char kernelspec_dir[PATH_MAX];
        char key[JP_MAX_KEY_LEN + 1];
        char **argv; /* NULL-terminated; owned after decoding */
        char **env;  /* "NAME=value", NULL-terminated; owned after decoding */
        struct hostmsg_limits limits;
        bool sandbox;
};

struct hostmsg_started {
        char kernel_id[JP_UUID_SIZE];
        int pid;
        char ipc_prefix[PATH_MAX]; /* host path; channel sockets are <prefix>-<port> */
};

struct hostmsg_failed {
        char kernel_id[JP_UUID_SIZE];
        char step[64];   /* which step of the start failed, e.g. "exec" */
        int error;       /* errno of that step */
        char message[HOSTMSG_ERROR_SIZE];
};

struct hostmsg_signal {
        char kernel_id[JP_UUID_SIZE];
        int signal;
};

struct hostmsg_exit {
        char kernel_id[JP_UUID_SIZE];
        int pid;
        int exit_code; /* -1 when killed by a signal */
        int signal;    /* 0 when it exited */
        char reason[32]; /* "exited", "signaled", "out-of-memory", "stopped" */
};

/* Sends one message; 0 or -errno (-EMSGSIZE past HOSTMSG_MAX_BODY). */
int hostmsg_send(int fd, enum hostmsg_type type, json_t *body);
/* Receives one message: 0 with *body set (caller decrefs), -EAGAIN when
 * none is waiting, -EPIPE when the peer is gone, -EBADMSG for a malformed or
 * oversized one (which is consumed). */
int hostmsg_recv(int fd, enum hostmsg_type *type, json_t **body);

json_t *hostmsg_start_encode(const struct hostmsg_start *m);
/* On success m owns argv and env; release with hostmsg_start_clear. */
int hostmsg_start_decode(json_t *body, struct hostmsg_start *m);
void hostmsg_start_clear(struct hostmsg_start *m);

json_t *hostmsg_started_encode(const struct hostmsg_started *m);
int hostmsg_started_decode(json_t *body, struct hostmsg_started *m);
json_t *hostmsg_failed_encode(const struct hostmsg_failed *m);
int hostmsg_failed_decode(json_t *body, struct hostmsg_failed *m);
json_t *hostmsg_signal_encode(const struct hostmsg_signal *m);
int hostmsg_signal_decode(json_t *body, struct hostmsg_signal *m);
json_t *hostmsg_exit_encode(const struct hostmsg_exit *m);
int hostmsg_exit_decode(json_t *body, struct hostmsg_exit *m);

#endif
