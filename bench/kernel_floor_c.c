/* bench/kernel_floor.py's "c-loop" kind: the loop of a forked kernel in C,
 * Python called only to run a cell and format its result. A bound for
 * issue 26's design (a kernel loop in C over libzmq that calls Python only
 * to run a cell), not a kernel: kernel_info and execute only, no stdin,
 * control, comms or output capture, as the "lean" kind.
 *
 * _glovebox_floor.serve(ip, ports, key, run): binds shell, iopub, stdin,
 * control and hb (ports: their five numbers in that order) and answers
 * until the process is killed. run(code) returns the result's display
 * data as JSON bytes, or None. Built by bench/kernel_floor.py with the
 * system's compiler; linked with libzmq, jansson and libcrypto. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <zmq.h>

#define MAX_FRAMES 16
#define DELIM      "<IDS|MSG>"

struct loop {
        void *shell, *iopub, *hb;
        const char *key;
        size_t key_len;
        char session[37];
        long count;
};

static void uuid4(char out[37])
{
        unsigned char b[16];
        static const char hex[] = "0123456789abcdef";
        int o = 0;

        if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
                memset(b, 0, sizeof(b));
        b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
        b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
        for (int i = 0; i < 16; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10)
                        out[o++] = '-';
                out[o++] = hex[b[i] >> 4];
                out[o++] = hex[b[i] & 15];
        }
        out[o] = '\0';
}

static void sign(const struct loop *l, const char *const parts[4], const size_t lens[4],
                 char out[65])
{
        static const char hex[] = "0123456789abcdef";
        unsigned char mac[32];
        unsigned int n = 0;
        HMAC_CTX *ctx = HMAC_CTX_new();

        HMAC_Init_ex(ctx, l->key, (int)l->key_len, EVP_sha256(), NULL);
        for (int i = 0; i < 4; i++)
                HMAC_Update(ctx, (const unsigned char *)parts[i], lens[i]);
        HMAC_Final(ctx, mac, &n);
        HMAC_CTX_free(ctx);
        for (unsigned i = 0; i < 32; i++) {
                out[2 * i] = hex[mac[i] >> 4];
                out[2 * i + 1] = hex[mac[i] & 15];
        }
        out[64] = '\0';
}

/* Sends [idents..., DELIM, signature, header, parent, "{}", content]. */
static void send_msg(const struct loop *l, void *sock, zmq_msg_t *idents, int nidents,
                     const char *topic, const char *type, const char *parent, size_t parent_len,
                     const char *content)
{
        char header[320], id[37], date[40], sig[65];
        struct timespec ts;
        struct tm tm;
        const char *parts[4];
        size_t lens[4];

        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        strftime(date, 24, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(date + 19, sizeof(date) - 19, ".%06ldZ", ts.tv_nsec / 1000);
        uuid4(id);
        snprintf(header, sizeof(header),
                 "{\"msg_id\":\"%s\",\"session\":\"%s\",\"username\":\"kernel\",\"date\":\"%s\","
                 "\"msg_type\":\"%s\",\"version\":\"5.3\"}",
                 id, l->session, date, type);
        parts[0] = header;
        lens[0] = strlen(header);
        parts[1] = parent;
        lens[1] = parent_len;
        parts[2] = "{}";
        lens[2] = 2;
        parts[3] = content;
        lens[3] = strlen(content);
        sign(l, parts, lens, sig);
        if (topic) {
                zmq_send(sock, topic, strlen(topic), ZMQ_SNDMORE);
        } else {
                for (int i = 0; i < nidents; i++) {
                        zmq_msg_t copy;

                        zmq_msg_init(&copy);
                        zmq_msg_copy(&copy, &idents[i]);
                        zmq_msg_send(&copy, sock, ZMQ_SNDMORE);
                }
        }
        zmq_send(sock, DELIM, strlen(DELIM), ZMQ_SNDMORE);
        zmq_send(sock, sig, 64, ZMQ_SNDMORE);
        for (int i = 0; i < 4; i++)
                zmq_send(sock, parts[i], lens[i], i < 3 ? ZMQ_SNDMORE : 0);
}

static void status(const struct loop *l, const char *state, const char *parent, size_t len)
{
        char content[64];

        snprintf(content, sizeof(content), "{\"execution_state\":\"%s\"}", state);
        send_msg(l, l->iopub, NULL, 0, "kernel.status", "status", parent, len, content);
}

/* One shell request; -1 when Python raised (the loop ends with it). */
static int handle(struct loop *l, PyObject *run)
{
        zmq_msg_t frames[MAX_FRAMES];
        int n = 0, delim = -1, more = 1, rc = 0;

        while (more && n < MAX_FRAMES) {
                zmq_msg_init(&frames[n]);
                if (zmq_msg_recv(&frames[n], l->shell, 0) < 0) {
                        zmq_msg_close(&frames[n]);
                        break;
                }
                more = zmq_msg_more(&frames[n]);
                if (delim < 0 && zmq_msg_size(&frames[n]) == strlen(DELIM) &&
                    memcmp(zmq_msg_data(&frames[n]), DELIM, strlen(DELIM)) == 0)
                        delim = n;
                n++;
        }
        if (delim >= 0 && n >= delim + 6) {
                const char *parts[4];
                size_t lens[4];
                char sig[65];

                for (int i = 0; i < 4; i++) {
                        parts[i] = zmq_msg_data(&frames[delim + 2 + i]);
                        lens[i] = zmq_msg_size(&frames[delim + 2 + i]);
                }
                sign(l, parts, lens, sig);
                if (zmq_msg_size(&frames[delim + 1]) == 64 &&
                    memcmp(zmq_msg_data(&frames[delim + 1]), sig, 64) == 0) {
                        json_t *header = json_loadb(parts[0], lens[0], 0, NULL);
                        const char *type = json_string_value(json_object_get(header, "msg_type"));

                        status(l, "busy", parts[0], lens[0]);
                        if (type && strcmp(type, "execute_request") == 0) {
                                json_t *content = json_loadb(parts[3], lens[3], 0, NULL);
                                const char *code =
                                    json_string_value(json_object_get(content, "code"));
                                PyObject *data = PyObject_CallFunction(run, "s", code ? code : "");
                                char *reply = NULL;

                                l->count++;
                                if (!data) {
                                        rc = -1;
                                } else if (PyBytes_Check(data)) {
                                        if (asprintf(&reply,
                                                     "{\"data\":%s,\"metadata\":{},"
                                                     "\"execution_count\":%ld}",
                                                     PyBytes_AS_STRING(data), l->count) > 0)
                                                send_msg(l, l->iopub, NULL, 0,
                                                         "kernel.execute_result", "execute_result",
                                                         parts[0], lens[0], reply);
                                        free(reply);
                                }
                                Py_XDECREF(data);
                                reply = NULL;
                                if (asprintf(&reply,
                                             "{\"status\":\"ok\",\"execution_count\":%ld,"
                                             "\"user_expressions\":{},\"payload\":[]}",
                                             l->count) > 0)
                                        send_msg(l, l->shell, frames, delim, NULL, "execute_reply",
                                                 parts[0], lens[0], reply);
                                free(reply);
                                json_decref(content);
                        } else {
                                send_msg(l, l->shell, frames, delim, NULL, "kernel_info_reply",
                                         parts[0], lens[0],
                                         "{\"status\":\"ok\",\"protocol_version\":\"5.3\","
                                         "\"implementation\":\"floor\",\"implementation_version\":"
                                         "\"1\",\"language_info\":{\"name\":\"python\"},"
                                         "\"banner\":\"\"}");
                        }
                        status(l, "idle", parts[0], lens[0]);
                        json_decref(header);
                }
        }
        for (int i = 0; i < n; i++)
                zmq_msg_close(&frames[i]);
        return rc;
}

static PyObject *serve(PyObject *self, PyObject *args)
{
        const char *ip, *key;
        int ports[5];
        PyObject *run;
        struct loop l = {0};
        void *ctx, *socks[5];
        static const int kinds[5] = {ZMQ_ROUTER, ZMQ_PUB, ZMQ_ROUTER, ZMQ_ROUTER, ZMQ_REP};
        char addr[128];

        (void)self;
        if (!PyArg_ParseTuple(args, "s(iiiii)sO", &ip, &ports[0], &ports[1], &ports[2], &ports[3],
                              &ports[4], &key, &run))
                return NULL;
        ctx = zmq_ctx_new();
        for (int i = 0; i < 5; i++) {
                socks[i] = zmq_socket(ctx, kinds[i]);
                snprintf(addr, sizeof(addr), "tcp://%s:%d", ip, ports[i]);
                if (zmq_bind(socks[i], addr) < 0)
                        return PyErr_Format(PyExc_OSError, "bind %s: %s", addr,
                                            zmq_strerror(zmq_errno()));
        }
        l.shell = socks[0];
        l.iopub = socks[1];
        l.hb = socks[4];
        l.key = key;
        l.key_len = strlen(key);
        uuid4(l.session);
        status(&l, "starting", "{}", 2);
        for (;;) {
                zmq_pollitem_t items[2] = {{l.shell, 0, ZMQ_POLLIN, 0}, {l.hb, 0, ZMQ_POLLIN, 0}};

                if (zmq_poll(items, 2, -1) < 0)
                        continue;
                if (items[1].revents) {
                        char buf[256];
                        int got = zmq_recv(l.hb, buf, sizeof(buf), 0);

                        if (got >= 0)
                                zmq_send(l.hb, buf,
                                         (size_t)got < sizeof(buf) ? (size_t)got : sizeof(buf), 0);
                }
                if (items[0].revents && handle(&l, run) < 0)
                        return NULL;
        }
}

static PyMethodDef methods[] = {{"serve", serve, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_glovebox_floor", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__glovebox_floor(void)
{
        return PyModule_Create(&module);
}
