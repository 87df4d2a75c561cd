/* A client session of one kernel: what Jupyter calls the WebSocket's
 * session_id. It owns the client's shell, control and stdin sockets (one
 * ZMQ identity, so stdin requests reach the client that asked) and a queue
 * of messages for it. At most one sink (a WebSocket connection) drains the
 * queue; while none is attached the queue keeps filling, bounded, and a
 * sink that attaches later with the same session_id gets every message in
 * order. A detached session lingers for --session-linger seconds; at most
 * --max-lingering-sessions of a kernel do, the oldest evicted first (its
 * client, should it come back, is told).
 *
 * What a sink has written counts as delivered, yet a client can lose the
 * last messages it was sent (a page that unloads stops reading before its
 * socket closes). So a resumable session also remembers the messages it
 * delivered last (its history, bounded by SESSION_HISTORY_MESSAGES and
 * SESSION_HISTORY_BYTES), and a client that reconnects naming the last
 * message it handled gets the ones after it again. */
#ifndef GLOVEBOX_SESSION_H
#define GLOVEBOX_SESSION_H

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/relay.h"

struct session_sink {
        /* The session's queue has messages. */
        void (*wake)(struct session_sink *sink);
        /* The session is going away (kernel deleted); detach now. */
        void (*closing)(struct session_sink *sink, int code, const char *reason);
};

/* An execute_request sent to the kernel and not yet answered. */
struct pending_exec {
        struct pending_exec *next;
        char msg_id[JP_MSG_ID_SIZE];
        char *header; /* the request's header JSON, the parent of our answers */
        double sent_at;    /* loop_now() when it went to the kernel */
        size_t code_bytes; /* of its code, for the audit line */
        bool timed_out;    /* its HTTP execution's deadline passed */
};

#define SESSION_MAX_PENDING 1024

/* How long a detached session that waits for no reply keeps its sockets. */
#define SESSION_PARK_SECONDS 10

/* The bounds of a session's history of delivered messages: its newest are
 * kept, up to this many and (but always the newest one) this many bytes,
 * or --replay-bytes if that is less. The messages are shared with every
 * other queue that holds them, not copied. */
#define SESSION_HISTORY_MESSAGES 1024
#define SESSION_HISTORY_BYTES    (4 * 1024 * 1024)

/* A ring of the messages a session delivered last, oldest at head. */
struct session_history {
        struct relay_msg **ring; /* SESSION_HISTORY_MESSAGES slots, made at the first */
        size_t head, count;
        size_t bytes;
        bool forgot; /* older messages were let go: an unknown id may be one */
};

struct session {
        struct session *next;
        struct kernel *kernel;
        char id[128];
        char identity[ZIO_IDENTITY_SIZE];
        struct zio *sockets[3]; /* shell, control, stdin, by enum jp_channel */
        struct outbox outbox;
        struct session_history history;
        struct session_sink *sink;
        lws_sorted_usec_list_t linger_timer;
        lws_sorted_usec_list_t park_timer;
        bool parked;                  /* lingering without sockets (session.c: park_soon) */
        bool private;                 /* not resumable: ends when its sink detaches */
        double detached_at;           /* monotonic seconds; the oldest lingering is evicted first */
        struct pending_exec *pending; /* newest first */
        size_t npending;
};

#define SESSION_ID_MAX 127

/* Finds the session id of k or creates it (id NULL or empty: a fresh,
 * private one). Returns NULL when out of memory or sockets. */
struct session *session_open(struct kernel *k, const char *id);
/* Attaches sink, replacing (and closing) any sink already attached. With
 * last_msg_id (the last message the client handled; NULL or "": none) the
 * messages the session delivered after that one are queued again, ahead of
 * the rest; an id the history no longer holds replays nothing, and if the
 * history has let messages go the client is told that some may be missing. */
void session_attach(struct session *s, struct session_sink *sink, const char *last_msg_id);
/* Detaches sink; the session lingers, queueing, for its reconnect. */
void session_detach(struct session *s, struct session_sink *sink);
/* Signs and sends a client message to the kernel on its channel. */
int session_send(struct session *s, struct jp_msg *msg);
/* A pooled kernel's first session's sockets, connected ahead: the next
 * session opened takes them (and their identity) instead of connecting
 * its own, so that the connections' handshakes, here and in the kernel,
 * are done before a claim rather than in the first request's path. No
 * descriptors are held for long by a kernel nobody connects to:
 * session_ahead_claimed closes them unused after SESSION_PARK_SECONDS.
 * 0 or -errno (then none are open). */
int session_ahead_open(struct kernel *k);
/* k was handed out: its sockets opened ahead wait SESSION_PARK_SECONDS
 * for a session. */
void session_ahead_claimed(struct kernel *k);
void session_ahead_close(struct kernel *k);
/* Connects sessions opened before the kernel's sockets existed. */
void session_connect_all(struct kernel *k);
/* The kernel's sockets moved (it restarted in a new sandbox): every
 * session's sockets reconnect to the new ones, and executions sent to the
 * old ones, which no kernel will answer, are answered with an error. */
void session_reconnect_all(struct kernel *k);
/* Closes every session's sockets to k, failing what they had pending,
 * without reconnecting (a checkpoint); session_connect_all joins them
 * again. */
void session_disconnect_all(struct kernel *k);
/* The next message for the sink (the caller owns the reference), or NULL.
 * After drops it is first a stderr stream message saying how many. */
struct relay_msg *session_next(struct session *s);
/* The sink has written m whole: it joins the history (a new reference) of
 * a resumable session. */
void session_delivered(struct session *s, struct relay_msg *m);
/* Queues m (a new reference) and wakes the sink. */
void session_deliver(struct session *s, struct relay_msg *m);
/* The kernel died: answer every pending execute_request with an error
 * (iopub error of ename/evalue, then an execute_reply with status error),
 * so no client waits forever. */
void session_fail_pending(struct session *s, const char *ename, const char *evalue);
/* The executions s is waiting for passed their deadline: their outcome is
 * "timeout", whatever the reply says. s may be NULL. */
void session_mark_timed_out(struct session *s);
/* Tells the sink, closes the sockets, frees s and nulls *sp. */
void session_destroy(struct session **sp, int code, const char *reason);
/* Restart and keep (gateway/kernels/keep.h): the resumable sessions of k as
 * [{"id", "identity"}] (the caller's), and one taken back, detached and
 * lingering, with its old ZMQ identity, so that what the kernel sends it
 * before its client reconnects is queued for it. 0 or -errno. */
json_t *session_keep_record(const struct kernel *k);
int session_adopt(struct kernel *k, const char *id, const char *identity);

#endif
