/* A process run in a sandbox for a client — E2B's commands
 * (envd_process.c), MCP's run_command (mcp_tools.c) — as opposed to a
 * kernel: started by the kernel-host with pipes for stdin, stdout and
 * stderr or on a terminal of the sandbox's own (pty), its output read as
 * it comes, and its end reported once, after all of its output (or
 * shortly after it died, when a child of it still holds a pipe open). */
#ifndef GLOVEBOX_PROCESS_H
#define GLOVEBOX_PROCESS_H

#include "protocol/hostmsg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct process;

/* What the owner hears, each with the ctx it gave. After failed() or
 * ended() the process is freed: the owner forgets it. */
struct process_ops {
        void (*started)(void *ctx);
        /* stream 1 is stdout, 2 stderr; a terminal's output is stream 1 */
        void (*output)(void *ctx, int stream, const uint8_t *data, size_t len);
        void (*failed)(void *ctx, const char *message);
        void (*ended)(void *ctx, const struct hostmsg_exit *ex);
};

/* Asks the kernel-host to start start->argv in sandbox start->sandbox_id,
 * on a terminal of start->rows by start->cols when start->pty; start->id
 * is filled in. stdin stays open for process_write_stdin when keep_stdin
 * or on a terminal (else the process reads end of file at once). 0, or
 * -errno (and no callback ever runs). The caller keeps start and what it
 * points to. */
int process_start(struct hostmsg_start *start, bool keep_stdin, const struct process_ops *ops,
                  void *ctx, struct process **out);
/* A process of a sandbox being restored from a checkpoint (id: its id
 * before, which the kernel-host registers it under again): ops hears
 * started() when the kernel-host hands over its new pipes (or, pty, its
 * terminal's new master), then as for process_start. 0, or -errno
 * (-EEXIST: id is still another's). */
int process_adopt(const char *id, bool keep_stdin, bool pty, const struct process_ops *ops,
                  void *ctx, struct process **out);
/* Whether its pipes are there: started, or handed over after a restore. */
bool process_attached(const struct process *p);
/* The owner lets go of a process without killing it (its sandbox is
 * being checkpointed and killed): nothing more is reported, and later
 * reports for its id are dropped. */
void process_forget(struct process **p);
/* The id the kernel-host knows it by. */
const char *process_id(const struct process *p);
/* It exited; its end is reported once its outputs are read. */
bool process_exited(const struct process *p);
/* stdin, or a terminal's master, is still open. */
bool process_stdin_open(const struct process *p);
/* Writes to its stdin: 0, -EPIPE once stdin is closed, or -errno. */
int process_write_stdin(struct process *p, const void *data, size_t len);
void process_close_stdin(struct process *p);
/* A terminal's new size: 0, -ENOTTY when it has no terminal (or its
 * master is closed), or -errno. */
int process_resize(struct process *p, uint16_t rows, uint16_t cols);
/* Its stdin's descriptor (non-blocking; the process keeps it), or -1
 * before it started or once closed: for a writer that waits for room
 * itself (pause.c feeds an archive). */
int process_stdin_fd(const struct process *p);
/* Reads what its outputs hold now, at most 16 pieces of 64 KiB each (output()
 * hears it), before an owner
 * that stops listening ends its own stream. */
void process_drain(struct process *p);
/* While held, its outputs are not read: the process blocks on a full
 * pipe (or terminal) instead of the gateway queueing what a slow client
 * does not take. Its end waits for them as always. */
void process_hold_output(struct process *p, bool hold);
/* SIGKILL kills it at once (the kernel-host's stop); other signals are
 * sent as they are. ended() follows. */
void process_signal(struct process *p, int sig);
/* The owner stops listening: nothing more is reported, and the process
 * is killed and freed once the kernel-host reports its end. */
void process_abandon(struct process **p);

#endif
