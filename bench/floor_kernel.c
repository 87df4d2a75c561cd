/* bench/burst_floor.py's kernel: a Jupyter kernel as cheap as a kernel can
 * be, so that many creates of it at once measure what a create costs
 * besides its kernel (the client, the gateway, the kernel-host, the sandbox
 * and its init, an exec). Not a kernel anyone would use: it runs no code.
 * It binds the five sockets of its connection file (tcp or ipc), sends
 * "starting", answers kernel_info_request, answers every execute_request
 * with the result "floor" (an execute_result, then the reply), busy and
 * idle around each, echoes the heartbeat, and exits once it has answered a
 * shutdown_request on shell or control. Requests whose signature is wrong
 * are dropped.
 *
 * usage: floor_kernel -f CONNECTION_FILE
 * Built by bench/burst_floor.py: cc -O2 floor_kernel.c -lzmq -ljansson -lcrypto */
#include "floor_wire.h"

#include <jansson.h>
#include <stdlib.h>

enum { SHELL, IOPUB, STDIN, CONTROL, HB, NSOCK };

struct kernel {
        struct floor_wire wire;
        void *sock[NSOCK];
        long count;
};

/* One request on shell or control; 1 once a shutdown is answered. */
static int handle(struct kernel *k, int which)
{
        static const char info[] =
            "{\"status\":\"ok\",\"protocol_version\":\"5.3\",\"implementation\":\"floor\","
            "\"implementation_version\":\"1\",\"language_info\":{\"name\":\"floor\","
            "\"version\":\"1\",\"mimetype\":\"text/plain\",\"file_extension\":\".txt\"},"
            "\"banner\":\"\",\"help_links\":[]}";
        const struct floor_wire *w = &k->wire;
        void *sock = k->sock[which], *iopub = k->sock[IOPUB];
        zmq_msg_t frames[FLOOR_MAX_FRAMES];
        const char *parts[4];
        size_t lens[4];
        int n, done = 0;
        int delim = floor_read(w, sock, frames, &n, parts, lens);

        if (delim >= 0) {
                json_t *header = json_loadb(parts[0], lens[0], 0, NULL);
                const char *type = json_string_value(json_object_get(header, "msg_type"));
                char reply[160];

                if (!type)
                        type = "";
                floor_status(w, iopub, "busy", parts[0], lens[0]);
                if (strcmp(type, "execute_request") == 0) {
                        k->count++;
                        snprintf(reply, sizeof(reply),
                                 "{\"data\":{\"text/plain\":\"floor\"},\"metadata\":{},"
                                 "\"execution_count\":%ld}",
                                 k->count);
                        floor_send(w, iopub, "kernel.execute_result", NULL, 0, "execute_result",
                                   parts[0], lens[0], reply);
                        snprintf(reply, sizeof(reply),
                                 "{\"status\":\"ok\",\"execution_count\":%ld,"
                                 "\"user_expressions\":{},\"payload\":[]}",
                                 k->count);
                        floor_send(w, sock, NULL, frames, delim, "execute_reply", parts[0], lens[0],
                                   reply);
                } else if (strcmp(type, "kernel_info_request") == 0) {
                        floor_send(w, sock, NULL, frames, delim, "kernel_info_reply", parts[0],
                                   lens[0], info);
                } else if (strcmp(type, "shutdown_request") == 0) {
                        floor_send(w, sock, NULL, frames, delim, "shutdown_reply", parts[0],
                                   lens[0], "{\"status\":\"ok\",\"restart\":false}");
                        done = 1;
                }
                floor_status(w, iopub, "idle", parts[0], lens[0]);
                json_decref(header);
        }
        for (int i = 0; i < n; i++)
                zmq_msg_close(&frames[i]);
        return done;
}

static int bind_all(struct kernel *k, void *ctx, json_t *conn)
{
        static const char *const names[NSOCK] = {"shell_port", "iopub_port", "stdin_port",
                                                 "control_port", "hb_port"};
        static const int kinds[NSOCK] = {ZMQ_ROUTER, ZMQ_PUB, ZMQ_ROUTER, ZMQ_ROUTER, ZMQ_REP};
        const char *ip = json_string_value(json_object_get(conn, "ip"));
        const char *transport = json_string_value(json_object_get(conn, "transport"));
        int ipc = transport && strcmp(transport, "ipc") == 0;
        char addr[4200];

        for (int i = 0; i < NSOCK; i++) {
                long port = (long)json_integer_value(json_object_get(conn, names[i]));

                k->sock[i] = zmq_socket(ctx, kinds[i]);
                /* As jupyter_client names them. */
                snprintf(addr, sizeof(addr), ipc ? "ipc://%s-%ld" : "tcp://%s:%ld",
                         ip ? ip : "127.0.0.1", port);
                if (!k->sock[i] || zmq_bind(k->sock[i], addr) < 0) {
                        fprintf(stderr, "floor_kernel: bind %s: %s\n", addr,
                                zmq_strerror(zmq_errno()));
                        return -1;
                }
        }
        return 0;
}

int main(int argc, char **argv)
{
        struct kernel k = {0};
        json_t *conn;
        char *key;
        void *ctx;

        if (argc != 3 || strcmp(argv[1], "-f") != 0) {
                fprintf(stderr, "usage: floor_kernel -f CONNECTION_FILE\n");
                return 2;
        }
        conn = json_load_file(argv[2], 0, NULL);
        if (!conn) {
                fprintf(stderr, "floor_kernel: cannot read %s\n", argv[2]);
                return 1;
        }
        key = strdup(json_string_value(json_object_get(conn, "key")) ?: "");
        if (!key)
                return 1;
        k.wire.key = key;
        k.wire.key_len = strlen(key);
        floor_uuid4(k.wire.session);
        ctx = zmq_ctx_new();
        if (!ctx || bind_all(&k, ctx, conn) < 0)
                return 1;
        json_decref(conn);
        floor_status(&k.wire, k.sock[IOPUB], "starting", "{}", 2);
        for (;;) {
                zmq_pollitem_t items[] = {{k.sock[SHELL], 0, ZMQ_POLLIN, 0},
                                          {k.sock[CONTROL], 0, ZMQ_POLLIN, 0},
                                          {k.sock[HB], 0, ZMQ_POLLIN, 0}};
                char buf[256];
                int got;

                if (zmq_poll(items, 3, -1) < 0)
                        continue;
                if (items[2].revents) {
                        got = zmq_recv(k.sock[HB], buf, sizeof(buf), 0);
                        if (got >= 0)
                                zmq_send(k.sock[HB], buf,
                                         (size_t)got < sizeof(buf) ? (size_t)got : sizeof(buf), 0);
                }
                if ((items[0].revents && handle(&k, SHELL)) ||
                    (items[1].revents && handle(&k, CONTROL)))
                        break;
        }
        for (int i = 0; i < NSOCK; i++)
                zmq_close(k.sock[i]);
        zmq_ctx_term(ctx);
        free(key);
        return 0;
}
