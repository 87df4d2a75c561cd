/* _glovebox_wire: the Jupyter wire of a zygote kernel's loop in C.
 *
 * zygote_kernel.py's Session sends and reads its messages through a Wire:
 * the four JSON parts encoded with Python's own C encoder (json's, as
 * jupyter_client's json_packer calls it: the same text), signed and laid
 * out as frames by protocol/wire.c (the gateway's codec) and sent with libzmq on
 * the pyzmq socket's own handle; a message read is checked and its parts
 * decoded with json's C scanner. jupyter_client's Session does the same in
 * Python, which a new kernel ran for each of its first messages, copying
 * the zygote's pages it touched. What the Wire does not take (another
 * signature scheme, buffers, a message already built) the Session does as
 * before (zygote_kernel.py's WireSession).
 *
 * Built into glovebox-zygote (zygote_main.c registers it) and, for the
 * tests and bench/kernel_floor.py, as an extension of the same Python.
 * Two threads call it (the loop's main and I/O threads). Encoding may run
 * Python (json_default, json_packer), where the GIL can pass to the other;
 * the signing and the frames run none, so one message's frames go out
 * whole, never interleaved with another's (the sockets are ROUTER and PUB:
 * a send never blocks). That holds while no identity is a Python class
 * acting as a buffer (Python 3.12's __buffer__): they are read first. */
#include "autoconf.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernel-host/zygote_wire.h"
#include "protocol/sign.h"
#include "protocol/wire.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define PROTOCOL_VERSION "5.3"

/* What the zygote gives every Wire, built once there (zygote_kernel.py's
 * wire_tools): the indexes of its tuple. */
enum tool {
        TOOL_MAKE_ENCODER, /* json.encoder.c_make_encoder */
        TOOL_DEFAULT,      /* jupyter_client's json_default */
        TOOL_ENCODE_STR,   /* json.encoder.c_encode_basestring */
        TOOL_SCANNER,      /* json.scanner.c_make_scanner(json.JSONDecoder()) */
        TOOL_PACK,         /* jupyter_client's json_packer: what the encoder refuses */
        TOOL_ADAPT,        /* jupyter_client's adapt: a message of another version */
        TOOL_TRACKER,      /* zmq's DONE, every sent message's "tracker" */
        TOOL_ZMQ_ERROR,    /* zmq.ZMQError */
        TOOL_COUNT,
};

typedef struct {
        PyObject ob_base; /* PyObject_HEAD */
        struct jp_signer *signer;
        int signing;        /* a key: messages are signed and checked */
        PyObject *session;  /* str: the Session's id */
        PyObject *username; /* str */
        PyObject *digests;  /* set: the Session's digest_history */
        Py_ssize_t digests_max;
        PyObject *tools; /* tuple, enum tool */
        pid_t pid;       /* a forked child sends nothing */
        int closed;      /* close(): the sockets are going; nothing is sent */
        unsigned long long count;
} Wire;

/* The zygote's signer (prepare()), which every kernel's Wire copies with
 * its own key. */
static struct jp_signer *proto;

static PyObject *tool(const Wire *w, enum tool t)
{
        return PyTuple_GET_ITEM(w->tools, t);
}

/* 1 once __init__ has run; 0 with an error set before. */
static int ready(const Wire *w)
{
        if (w->tools && w->signer)
                return 1;
        PyErr_SetString(PyExc_ValueError, "a Wire that was not initialised");
        return 0;
}

/* ---- encoding ---------------------------------------------------------------- */

/* obj as json_packer makes it: json.dumps(obj, default=json_default,
 * ensure_ascii=False, allow_nan=False) in UTF-8 with surrogateescape; what
 * the encoder or UTF-8 refuses (NaN, an unknown type, a lone surrogate)
 * goes to json_packer itself, which cleans it and warns, or raises as it
 * does. A new reference to bytes, or NULL. */
static PyObject *encode(const Wire *w, PyObject *obj)
{
        PyObject *markers, *encoder = NULL, *chunks = NULL, *text = NULL, *out = NULL;
        PyObject *empty = NULL;

        markers = PyDict_New();
        if (!markers)
                return NULL;
        encoder = PyObject_CallFunction(tool(w, TOOL_MAKE_ENCODER), "OOOOssOOO", markers,
                                        tool(w, TOOL_DEFAULT), tool(w, TOOL_ENCODE_STR), Py_None,
                                        ": ", ", ", Py_False, Py_False, Py_False);
        if (!encoder)
                goto done;
        chunks = PyObject_CallFunction(encoder, "On", obj, (Py_ssize_t)0);
        if (!chunks)
                goto refused;
        empty = PyUnicode_New(0, 0);
        text = empty ? PyUnicode_Join(empty, chunks) : NULL;
        if (!text)
                goto done;
        out = PyUnicode_AsEncodedString(text, "utf-8", "surrogateescape");
        if (out)
                goto done;
refused:
        if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError)) {
                PyErr_Clear();
                out = PyObject_CallOneArg(tool(w, TOOL_PACK), obj);
                if (out && !PyBytes_Check(out)) {
                        Py_CLEAR(out);
                        PyErr_SetString(PyExc_TypeError, "the packer returned no bytes");
                }
        }
done:
        Py_XDECREF(empty);
        Py_XDECREF(text);
        Py_XDECREF(chunks);
        Py_XDECREF(encoder);
        Py_DECREF(markers);
        return out;
}

/* A message's content as Session.serialize packs it: a dict encoded,
 * bytes as they are, str in UTF-8. */
static PyObject *encode_content(const Wire *w, PyObject *content)
{
        if (PyDict_Check(content))
                return encode(w, content);
        if (PyBytes_Check(content)) {
                Py_INCREF(content);
                return content;
        }
        if (PyUnicode_Check(content))
                return PyUnicode_AsUTF8String(content);
        PyErr_Format(PyExc_TypeError, "Content incorrect type: %s", Py_TYPE(content)->tp_name);
        return NULL;
}

/* jupyter_client's extract_header: the header of a message, or a header
 * itself; {} for none. A new reference, or NULL (KeyError for a dict
 * that is neither). */
static PyObject *extract_header(PyObject *parent)
{
        PyObject *h;
        int truth;

        if (parent == Py_None)
                return PyDict_New();
        truth = PyObject_IsTrue(parent);
        if (truth < 0)
                return NULL;
        if (!truth)
                return PyDict_New();
        h = PyMapping_GetItemString(parent, "header");
        if (!h) {
                PyObject *id;

                if (!PyErr_ExceptionMatches(PyExc_KeyError))
                        return NULL;
                PyErr_Clear();
                id = PyMapping_GetItemString(parent, "msg_id");
                if (!id)
                        return NULL;
                Py_DECREF(id);
                Py_INCREF(parent);
                h = parent;
        }
        if (!PyDict_Check(h)) {
                PyObject *d = PyObject_CallOneArg((PyObject *)&PyDict_Type, h);

                Py_DECREF(h);
                return d;
        }
        return h;
}

/* The time now as jupyter_client's headers carry it: datetime's isoformat
 * of a UTC instant, "+00:00" written "Z". */
static PyObject *utc_date(void)
{
        struct timespec ts;
        struct tm tm;
        char buf[64];
        size_t n;
        long us;

        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
        us = ts.tv_nsec / 1000;
        if (us)
                snprintf(buf + n, sizeof(buf) - n, ".%06ldZ", us);
        else
                snprintf(buf + n, sizeof(buf) - n, "Z");
        return PyUnicode_FromString(buf);
}

static PyObject *next_id(Wire *w)
{
        /* The pid of now, as Session's: a forked child's ids are its own. */
        return PyUnicode_FromFormat("%U_%d_%llu", w->session, (int)getpid(), w->count++);
}

/* ---- the socket -------------------------------------------------------------- */

static PyObject *zmq_failed(const Wire *w)
{
        PyObject *e = PyObject_CallFunction(tool(w, TOOL_ZMQ_ERROR), "i", errno);

        if (e) {
                PyErr_SetObject((PyObject *)Py_TYPE(e), e);
                Py_DECREF(e);
        }
        return NULL;
}

static int send_bytes(void *sock, const void *p, size_t n, int more)
{
        int rc;

        /* A signal between two frames must not leave half a message. */
        do
                rc = zmq_send(sock, p, n, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
        while (rc < 0 && errno == EINTR);
        return rc < 0 ? -1 : 0;
}

/* The routing identities (none, one, or a list of buffers), each checked
 * before any frame goes, as pyzmq's send_multipart checks them: what is
 * queued with SNDMORE would otherwise lead the next message. n of them in
 * views (at most JP_MAX_IDENTITIES); 0, or -1 with a Python error set and
 * none held. */
static int identity_views(PyObject *ident, Py_buffer *views, Py_ssize_t *n)
{
        Py_ssize_t count;

        *n = 0;
        if (ident == Py_None)
                return 0;
        if (!PyList_Check(ident)) {
                if (PyObject_GetBuffer(ident, &views[0], PyBUF_SIMPLE) < 0)
                        return -1;
                *n = 1;
                return 0;
        }
        count = PyList_GET_SIZE(ident);
        if (count > JP_MAX_IDENTITIES) {
                PyErr_SetString(PyExc_ValueError, "too many routing identities");
                return -1;
        }
        for (; *n < count; (*n)++) {
                if (PyObject_GetBuffer(PyList_GET_ITEM(ident, *n), &views[*n], PyBUF_SIMPLE) < 0) {
                        while (*n > 0)
                                PyBuffer_Release(&views[--*n]);
                        return -1;
                }
        }
        return 0;
}

/* The frames jp_wire_encode laid out. No Python code runs here: nothing
 * of another thread comes between the caller's checks and the frames. -1
 * with errno from libzmq. */
static int send_frames(void *sock, const struct jp_bytes *frames, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (send_bytes(sock, frames[i].ptr, frames[i].len, i + 1 < n) < 0)
                        return -1;
        }
        return 0;
}

/* ---- Wire.send ----------------------------------------------------------------- */

static PyObject *new_header(Wire *w, PyObject *msg_type)
{
        PyObject *h = PyDict_New(), *id = NULL, *date = NULL;
        int ok;

        if (!h)
                return NULL;
        id = next_id(w);
        date = utc_date();
        ok = id && date && !PyDict_SetItemString(h, "msg_id", id) &&
             !PyDict_SetItemString(h, "msg_type", msg_type) &&
             !PyDict_SetItemString(h, "username", w->username) &&
             !PyDict_SetItemString(h, "session", w->session) &&
             !PyDict_SetItemString(h, "date", date);
        if (ok) {
                PyObject *v = PyUnicode_FromString(PROTOCOL_VERSION);

                ok = v && !PyDict_SetItemString(h, "version", v);
                Py_XDECREF(v);
        }
        Py_XDECREF(id);
        Py_XDECREF(date);
        if (!ok)
                Py_CLEAR(h);
        return h;
}

/* The four parts (header, parent header, metadata, content) packed as
 * Session.serialize packs them, signed, and sent after ident's identities
 * on the socket of handle: 0 drops them, as does a wire closed (close()).
 * 0, or -1 with an exception. */
static int send_parts(Wire *w, unsigned long long handle, PyObject *const objs[4], PyObject *ident)
{
        PyObject *parts[4] = {NULL, NULL, NULL, NULL};
        struct jp_msg wire_msg;
        struct jp_bytes *views[4] = {&wire_msg.header, &wire_msg.parent_header, &wire_msg.metadata,
                                     &wire_msg.content};
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        char signature[JP_SIGNATURE_HEX_LEN + 1];
        Py_buffer ids[JP_MAX_IDENTITIES];
        Py_ssize_t nids = 0;
        int rc = -1, n;

        parts[0] = encode(w, objs[0]);
        parts[1] = parts[0] ? encode(w, objs[1]) : NULL;
        parts[2] = parts[1] ? encode(w, objs[2]) : NULL;
        parts[3] = parts[2] ? encode_content(w, objs[3]) : NULL;
        if (!parts[3] || identity_views(ident, ids, &nids) < 0)
                goto done;
        jp_msg_init(&wire_msg);
        for (size_t i = 0; i < 4; i++)
                *views[i] = (struct jp_bytes){(const uint8_t *)PyBytes_AS_STRING(parts[i]),
                                              (size_t)PyBytes_GET_SIZE(parts[i])};
        for (Py_ssize_t i = 0; i < nids; i++)
                wire_msg.identities[i] = (struct jp_bytes){ids[i].buf, (size_t)ids[i].len};
        wire_msg.nidentities = (size_t)nids;
        n = jp_wire_encode(&wire_msg, w->signer, signature, frames);
        if (n < 0) {
                PyErr_SetString(PyExc_RuntimeError, "the message could not be signed");
                goto done;
        }
        /* Checked last, after every call into Python: a close() in another
         * thread comes before this check or after the frames. */
        if (handle && !w->closed && send_frames((void *)(uintptr_t)handle, frames, (size_t)n) < 0) {
                zmq_failed(w);
                goto done;
        }
        rc = 0;
done:
        for (Py_ssize_t i = 0; i < nids; i++)
                PyBuffer_Release(&ids[i]);
        for (size_t i = 0; i < 4; i++)
                Py_XDECREF(parts[i]);
        return rc;
}

/* Wire.send(handle, msg_type, content, parent, ident, metadata): what
 * Session.send(socket, msg_type, content, parent, ident, metadata=...)
 * does, the message built, packed, signed and sent; returns the message
 * dict as Session.msg makes it (its date a string). Handle 0, or a wire
 * closed (close()), builds the message and drops it, as a closed IOPub
 * does; a forked child gets None and sends nothing, as Session's pid
 * check gives. */
static PyObject *wire_send(Wire *w, PyObject *args)
{
        unsigned long long handle;
        PyObject *msg_type, *content, *parent, *ident, *metadata;
        PyObject *header = NULL, *parent_header = NULL, *meta = NULL, *body = NULL;
        PyObject *msg = NULL;

        if (!ready(w) || !PyArg_ParseTuple(args, "KUOOOO", &handle, &msg_type, &content, &parent,
                                           &ident, &metadata))
                return NULL;
        if (getpid() != w->pid)
                Py_RETURN_NONE;
        header = new_header(w, msg_type);
        parent_header = header ? extract_header(parent) : NULL;
        meta = parent_header ? PyDict_New() : NULL;
        if (!meta)
                goto done;
        if (metadata != Py_None) {
                /* dict.update's own rules: a mapping or pairs. */
                PyObject *r = PyDict_Check(metadata)
                                  ? (PyDict_Update(meta, metadata) < 0 ? NULL : Py_NewRef(Py_None))
                                  : PyObject_CallMethod(meta, "update", "O", metadata);

                if (!r)
                        goto done;
                Py_DECREF(r);
        }
        if (content == Py_None)
                body = PyDict_New();
        else {
                Py_INCREF(content);
                body = content;
        }
        if (!body || send_parts(w, handle, (PyObject *const[4]){header, parent_header, meta, body},
                                ident) < 0)
                goto done;
        msg = Py_BuildValue("{sOsOsOsOsOsOsO}", "header", header, "msg_id",
                            PyDict_GetItemString(header, "msg_id"), "msg_type", msg_type,
                            "parent_header", parent_header, "content", body, "metadata", meta,
                            "tracker", tool(w, TOOL_TRACKER));
done:
        Py_XDECREF(body);
        Py_XDECREF(meta);
        Py_XDECREF(parent_header);
        Py_XDECREF(header);
        return msg;
}

/* Wire.send_message(handle, msg, ident): Session.send(socket, msg,
 * ident=ident) for a message built beforehand (a display's, ipykernel's
 * execute_result): its header, parent header and metadata packed as they
 * are, its content as Session.serialize packs it ({} for None); a key
 * missing is a KeyError, as there. Returns msg, its "tracker" set as
 * Session sets it, or None in a forked child (which sends nothing);
 * handle 0 or a closed wire drops it. */
static PyObject *wire_send_message(Wire *w, PyObject *args)
{
        static const char *const keys[4] = {"header", "parent_header", "metadata", "content"};
        unsigned long long handle;
        PyObject *msg, *ident, *objs[4] = {NULL, NULL, NULL, NULL}, *res = NULL;

        if (!ready(w) || !PyArg_ParseTuple(args, "KO!O", &handle, &PyDict_Type, &msg, &ident))
                return NULL;
        if (getpid() != w->pid)
                Py_RETURN_NONE;
        for (size_t i = 0; i < 4; i++) {
                PyObject *v = PyDict_GetItemString(msg, keys[i]);

                if (i == 3 && (!v || v == Py_None))
                        objs[i] = PyDict_New();
                else if (v)
                        objs[i] = Py_NewRef(v);
                else
                        PyErr_SetString(PyExc_KeyError, keys[i]);
                if (!objs[i])
                        goto done;
        }
        /* Its tracker, as Session sets it: done at once. */
        if (send_parts(w, handle, objs, ident) == 0 &&
            PyDict_SetItemString(msg, "tracker", tool(w, TOOL_TRACKER)) == 0)
                res = Py_NewRef(msg);
done:
        for (size_t i = 0; i < 4; i++)
                Py_XDECREF(objs[i]);
        return res;
}

/* ---- Wire.deserialize ------------------------------------------------------------ */

/* A part as json_unpacker reads it: UTF-8 with "replace", json.loads. */
static PyObject *decode(const Wire *w, PyObject *part)
{
        Py_buffer view;
        PyObject *text, *res = NULL, *obj = NULL;
        Py_ssize_t at = 0, len, end;

        if (PyObject_GetBuffer(part, &view, PyBUF_SIMPLE) < 0)
                return NULL;
        text = PyUnicode_DecodeUTF8(view.buf, view.len, "replace");
        PyBuffer_Release(&view);
        if (!text)
                return NULL;
        len = PyUnicode_GET_LENGTH(text);
#define JSON_SPACE(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')
        if (len > 0 && PyUnicode_READ_CHAR(text, 0) == 0xfeff) {
                PyErr_SetString(PyExc_ValueError, "Unexpected UTF-8 BOM (decode using utf-8-sig)");
                goto done;
        }
        while (at < len && JSON_SPACE(PyUnicode_READ_CHAR(text, at)))
                at++;
        res = PyObject_CallFunction(tool(w, TOOL_SCANNER), "On", text, at);
        if (!res) {
                if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
                        PyErr_Clear();
                        PyErr_Format(PyExc_ValueError, "Expecting value: char %zd", at);
                }
                goto done;
        }
        if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
                PyErr_SetString(PyExc_TypeError, "the scanner returned no (value, end)");
                goto done;
        }
        end = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 1));
        if (end < 0 && PyErr_Occurred())
                goto done;
        while (end < len && JSON_SPACE(PyUnicode_READ_CHAR(text, end)))
                end++;
#undef JSON_SPACE
        if (end != len) {
                PyErr_Format(PyExc_ValueError, "Extra data: char %zd", end);
                goto done;
        }
        obj = PyTuple_GET_ITEM(res, 0);
        Py_INCREF(obj);
done:
        Py_XDECREF(res);
        Py_DECREF(text);
        return obj;
}

/* jupyter_client's _cull_digest_history: a tenth of the signatures (at
 * least what is over the limit) forgotten once there are too many. */
static int cull_digests(const Wire *w)
{
        Py_ssize_t size = PySet_GET_SIZE(w->digests), n = size / 10;
        PyObject *it, *item, *drop;

        if (size - w->digests_max > n)
                n = size - w->digests_max;
        if (n >= size)
                return PySet_Clear(w->digests);
        drop = PyList_New(0);
        it = drop ? PyObject_GetIter(w->digests) : NULL;
        if (!it) {
                Py_XDECREF(drop);
                return -1;
        }
        while (PyList_GET_SIZE(drop) < n && (item = PyIter_Next(it))) {
                int rc = PyList_Append(drop, item);

                Py_DECREF(item);
                if (rc < 0)
                        break;
        }
        Py_DECREF(it);
        for (Py_ssize_t i = 0; !PyErr_Occurred() && i < PyList_GET_SIZE(drop); i++)
                PySet_Discard(w->digests, PyList_GET_ITEM(drop, i));
        Py_DECREF(drop);
        return PyErr_Occurred() ? -1 : 0;
}

/* The signature of msg_list (its first four parts after it) checked as
 * Session.deserialize checks it: signed, not seen before (and remembered),
 * matching. 0, or -1 with the error Session raises set. */
static int check_signature(Wire *w, PyObject *list, Py_ssize_t n)
{
        PyObject *signature;
        struct jp_msg msg = {0};
        struct jp_bytes *views[4] = {&msg.header, &msg.parent_header, &msg.metadata, &msg.content};
        Py_buffer bufs[4];
        size_t got = 0;
        int seen, rc;

        if (n < 1) {
                PyErr_SetString(PyExc_IndexError, "list index out of range");
                return -1;
        }
        signature = PyList_GET_ITEM(list, 0);
        if (!PyBytes_Check(signature)) {
                PyErr_SetString(PyExc_TypeError, "a signature that is not bytes");
                return -1;
        }
        if (PyBytes_GET_SIZE(signature) == 0) {
                PyErr_SetString(PyExc_ValueError, "Unsigned Message");
                return -1;
        }
        seen = PySet_Contains(w->digests, signature);
        if (seen < 0)
                return -1;
        if (seen) {
                PyErr_Format(PyExc_ValueError, "Duplicate Signature: %R", signature);
                return -1;
        }
        /* As _add_digest: a history of size 0 keeps nothing. */
        if (w->digests_max > 0 &&
            (PySet_Add(w->digests, signature) < 0 ||
             (PySet_GET_SIZE(w->digests) > w->digests_max && cull_digests(w) < 0)))
                return -1;
        if (n < 5) {
                /* Session signs the parts there are, which cannot match. */
                PyErr_Format(PyExc_ValueError, "Invalid Signature: %R", signature);
                return -1;
        }
        for (; got < 4; got++) {
                if (PyObject_GetBuffer(PyList_GET_ITEM(list, (Py_ssize_t)got + 1), &bufs[got],
                                       PyBUF_SIMPLE) < 0)
                        break;
                views[got]->ptr = bufs[got].buf;
                views[got]->len = (size_t)bufs[got].len;
        }
        rc = got == 4
                 ? jp_signer_verify(w->signer, &msg, (const uint8_t *)PyBytes_AS_STRING(signature),
                                    (size_t)PyBytes_GET_SIZE(signature))
                 : -1;
        for (size_t i = 0; i < got; i++)
                PyBuffer_Release(&bufs[i]);
        if (got < 4)
                return -1;
        if (rc < 0) {
                PyErr_Format(PyExc_ValueError, "Invalid Signature: %R", signature);
                return -1;
        }
        return 0;
}

/* True for a header jupyter_client's adapt would leave as it is: a date,
 * and a version of the protocol's major number. */
static int current_version(PyObject *header)
{
        PyObject *v = PyDict_GetItemString(header, "version");
        const char *s;

        if (!PyDict_GetItemString(header, "date") || !v || !PyUnicode_Check(v))
                return 0;
        s = PyUnicode_AsUTF8(v);
        if (!s) {
                PyErr_Clear();
                return 0;
        }
        return strncmp(s, PROTOCOL_VERSION, 2) == 0;
}

/* Wire.deserialize(msg_list): Session.deserialize(msg_list) for a sequence
 * of bytes (copy=True, content=True), but for the dates of the header and
 * parent header, which stay strings (as they came). */
static PyObject *wire_deserialize(Wire *w, PyObject *msg_list)
{
        PyObject *msg = NULL, *header = NULL, *parts[3] = {NULL, NULL, NULL}, *buffers = NULL;
        PyObject *msg_id, *msg_type, *list;
        Py_ssize_t n;

        if (!ready(w))
                return NULL;
        list = PySequence_List(msg_list);
        if (!list)
                return NULL;
        n = PyList_GET_SIZE(list);
        if (w->signing ? check_signature(w, list, n) < 0 : n < 5) {
                if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_TypeError,
                                        "malformed message, must have at least 5 elements");
                Py_DECREF(list);
                return NULL;
        }
        header = decode(w, PyList_GET_ITEM(list, 1));
        if (!header) {
                Py_DECREF(list);
                return NULL;
        }
        if (!PyDict_Check(header)) {
                PyErr_SetString(PyExc_TypeError, "a header that is not an object");
                goto done;
        }
        msg_id = PyDict_GetItemString(header, "msg_id");
        msg_type = PyDict_GetItemString(header, "msg_type");
        if (!msg_id || !msg_type) {
                PyErr_SetString(PyExc_KeyError, msg_id ? "msg_type" : "msg_id");
                goto done;
        }
        for (size_t i = 0; i < 3; i++) {
                parts[i] = decode(w, PyList_GET_ITEM(list, (Py_ssize_t)i + 2));
                if (!parts[i])
                        goto done;
        }
        buffers = PyList_New(0);
        for (Py_ssize_t i = 5; buffers && i < n; i++) {
                PyObject *view = PyMemoryView_FromObject(PyList_GET_ITEM(list, i));

                if (!view || PyList_Append(buffers, view) < 0) {
                        Py_XDECREF(view);
                        goto done;
                }
                Py_DECREF(view);
        }
        if (!buffers)
                goto done;
        msg = Py_BuildValue("{sOsOsOsOsOsOsO}", "header", header, "msg_id", msg_id, "msg_type",
                            msg_type, "parent_header", parts[0], "metadata", parts[1], "content",
                            parts[2], "buffers", buffers);
        if (msg && !current_version(header)) {
                PyObject *adapted = PyObject_CallOneArg(tool(w, TOOL_ADAPT), msg);

                Py_DECREF(msg);
                msg = adapted;
        }
done:
        Py_XDECREF(buffers);
        for (size_t i = 0; i < 3; i++)
                Py_XDECREF(parts[i]);
        Py_DECREF(header);
        Py_DECREF(list);
        return msg;
}

/* ---- the type --------------------------------------------------------------------- */

static PyObject *wire_next_id(Wire *w, PyObject *unused)
{
        return ready(w) ? next_id(w) : NULL;
}

/* The signer of key, replacing w's only once it is made: a refused key
 * leaves a Wire as it was. 0, or -1 with ValueError set. */
static int set_key(Wire *w, const Py_buffer *key)
{
        struct jp_signer *signer = NULL;

        if (jp_signer_new_like(proto, key->buf, (size_t)key->len, &signer) < 0) {
                PyErr_SetString(PyExc_ValueError, "a key the signer does not take");
                return -1;
        }
        jp_signer_destroy(&w->signer);
        w->signer = signer;
        w->signing = key->len > 0;
        return 0;
}

/* Wire.rekey(key): signs and checks with key from now on, its count of
 * ids going on (the gateway re-keys a restored copy of a kernel). */
static PyObject *wire_rekey(Wire *w, PyObject *arg)
{
        Py_buffer key;
        int rc;

        if (!ready(w) || PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
                return NULL;
        rc = set_key(w, &key);
        PyBuffer_Release(&key);
        if (rc < 0)
                return NULL;
        Py_RETURN_NONE;
}

/* Wire.close(): nothing more is sent (messages are built and dropped), so
 * that the sockets can be closed while another thread still sends: called
 * with the GIL, it comes between two sends, never inside one. */
static PyObject *wire_close(Wire *w, PyObject *unused)
{
        w->closed = 1;
        Py_RETURN_NONE;
}

/* Wire(key, session, username, digest_history, digest_history_size, tools) */
static int wire_init(Wire *w, PyObject *args, PyObject *kw)
{
        Py_buffer key;
        PyObject *session, *username, *digests, *tools;
        Py_ssize_t digests_max;
        int rc;

        if (kw && PyDict_GET_SIZE(kw)) {
                PyErr_SetString(PyExc_TypeError, "Wire() takes no keyword arguments");
                return -1;
        }
        if (!PyArg_ParseTuple(args, "y*UUO!nO!", &key, &session, &username, &PySet_Type, &digests,
                              &digests_max, &PyTuple_Type, &tools))
                return -1;
        if (PyTuple_GET_SIZE(tools) != TOOL_COUNT) {
                PyBuffer_Release(&key);
                PyErr_SetString(PyExc_ValueError, "a tools tuple of another size");
                return -1;
        }
        rc = set_key(w, &key);
        PyBuffer_Release(&key);
        if (rc < 0)
                return -1;
        w->closed = 0;
        Py_INCREF(session);
        Py_XSETREF(w->session, session);
        Py_INCREF(username);
        Py_XSETREF(w->username, username);
        Py_INCREF(digests);
        Py_XSETREF(w->digests, digests);
        Py_INCREF(tools);
        Py_XSETREF(w->tools, tools);
        w->digests_max = digests_max;
        w->pid = getpid();
        w->count = 0;
        return 0;
}

static void wire_dealloc(Wire *w)
{
        jp_signer_destroy(&w->signer);
        Py_XDECREF(w->session);
        Py_XDECREF(w->username);
        Py_XDECREF(w->digests);
        Py_XDECREF(w->tools);
        Py_TYPE(w)->tp_free((PyObject *)w);
}

/* prepare(): the signer every Wire of this process and its children is
 * copied from, made now (in the zygote, before any fork). */
static PyObject *wire_prepare(PyObject *module, PyObject *unused)
{
        static const char key[] = "glovebox";

        if (!proto && jp_signer_new(key, sizeof(key) - 1, &proto) < 0) {
                PyErr_SetString(PyExc_RuntimeError, "no HMAC-SHA256 signer");
                return NULL;
        }
        Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"prepare", wire_prepare, METH_NOARGS,
     "prepare(): the signer later Wires copy, made once before any fork"},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef wire_methods[] = {
    {"send", (PyCFunction)wire_send, METH_VARARGS,
     "send(handle, msg_type, content, parent, ident, metadata) -> message dict"},
    {"send_message", (PyCFunction)wire_send_message, METH_VARARGS,
     "send_message(handle, msg, ident) -> msg: a message built beforehand"},
    {"deserialize", (PyCFunction)wire_deserialize, METH_O, "deserialize(msg_list) -> message dict"},
    {"next_id", (PyCFunction)wire_next_id, METH_NOARGS, "the next message id"},
    {"rekey", (PyCFunction)wire_rekey, METH_O, "rekey(key): sign and check with key from now on"},
    {"close", (PyCFunction)wire_close, METH_NOARGS,
     "close(): nothing more is sent; messages are built and dropped"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject wire_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_glovebox_wire.Wire",
    .tp_basicsize = sizeof(Wire),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zygote kernel's Jupyter wire: Session.send and deserialize in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)wire_init,
    .tp_dealloc = (destructor)wire_dealloc,
    .tp_methods = wire_methods,
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_glovebox_wire",
    .m_doc = "A zygote kernel's Jupyter wire in C (kernel-host/zygote_wire.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__glovebox_wire(void)
{
        PyObject *m;

        if (PyType_Ready(&wire_type) < 0)
                return NULL;
        m = PyModule_Create(&wire_module);
        if (!m)
                return NULL;
        Py_INCREF(&wire_type);
        if (PyModule_AddObject(m, "Wire", (PyObject *)&wire_type) < 0) {
                Py_DECREF(&wire_type);
                Py_DECREF(m);
                return NULL;
        }
        return m;
}
