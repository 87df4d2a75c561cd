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
 * system's compiler; linked with libzmq, jansson and libcrypto. Its wire,
 * bench/floor_wire.h, is bench/floor_kernel.c's too. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "floor_wire.h"

#include <jansson.h>

struct loop {
        struct floor_wire wire;
        void *shell, *iopub, *hb;
        long count;
};

/* One shell request; -1 when Python raised (the loop ends with it). */
static int handle(struct loop *l, PyObject *run)
{
        const struct floor_wire *w = &l->wire;
        zmq_msg_t frames[FLOOR_MAX_FRAMES];
        const char *parts[4];
        size_t lens[4];
        int n, rc = 0;
        int delim = floor_read(w, l->shell, frames, &n, parts, lens);

        if (delim >= 0) {
                json_t *header = json_loadb(parts[0], lens[0], 0, NULL);
                const char *type = json_string_value(json_object_get(header, "msg_type"));

                floor_status(w, l->iopub, "busy", parts[0], lens[0]);
                if (type && strcmp(type, "execute_request") == 0) {
                        json_t *content = json_loadb(parts[3], lens[3], 0, NULL);
                        const char *code = json_string_value(json_object_get(content, "code"));
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
                                        floor_send(w, l->iopub, "kernel.execute_result", NULL, 0,
                                                   "execute_result", parts[0], lens[0], reply);
                                free(reply);
                        }
                        Py_XDECREF(data);
                        reply = NULL;
                        if (asprintf(&reply,
                                     "{\"status\":\"ok\",\"execution_count\":%ld,"
                                     "\"user_expressions\":{},\"payload\":[]}",
                                     l->count) > 0)
                                floor_send(w, l->shell, NULL, frames, delim, "execute_reply",
                                           parts[0], lens[0], reply);
                        free(reply);
                        json_decref(content);
                } else {
                        floor_send(w, l->shell, NULL, frames, delim, "kernel_info_reply", parts[0],
                                   lens[0],
                                   "{\"status\":\"ok\",\"protocol_version\":\"5.3\","
                                   "\"implementation\":\"floor\",\"implementation_version\":"
                                   "\"1\",\"language_info\":{\"name\":\"python\"},"
                                   "\"banner\":\"\"}");
                }
                floor_status(w, l->iopub, "idle", parts[0], lens[0]);
                json_decref(header);
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
        l.wire.key = key;
        l.wire.key_len = strlen(key);
        floor_uuid4(l.wire.session);
        floor_status(&l.wire, l.iopub, "starting", "{}", 2);
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
