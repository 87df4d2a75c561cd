/* The Jupyter wire of bench's two C kernels (bench/kernel_floor_c.c, the
 * loop of bench/kernel_floor.py's c-loop kind, and bench/floor_kernel.c, the
 * kernel that runs no code): messages read and checked, signed and sent,
 * over libzmq with OpenSSL's HMAC-SHA256. Header-only: each is built alone
 * with the system's compiler, by the benchmark that uses it. */
#ifndef GLOVEBOX_BENCH_FLOOR_WIRE_H
#define GLOVEBOX_BENCH_FLOOR_WIRE_H

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <zmq.h>

#define FLOOR_MAX_FRAMES 16
#define FLOOR_DELIM      "<IDS|MSG>"

struct floor_wire {
        const void *key;
        size_t key_len;
        char session[37];
};

static void floor_uuid4(char out[37])
{
        static const char hex[] = "0123456789abcdef";
        unsigned char b[16];
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

static void floor_sign(const struct floor_wire *w, const char *const parts[4], const size_t lens[4],
                       char out[65])
{
        static const char hex[] = "0123456789abcdef";
        unsigned char mac[32];
        unsigned int n = 0;
        HMAC_CTX *ctx = HMAC_CTX_new();

        HMAC_Init_ex(ctx, w->key, (int)w->key_len, EVP_sha256(), NULL);
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

/* Sends [topic | idents...], DELIM, signature, header, parent, "{}",
 * content: on IOPub with topic, on a ROUTER socket with the request's
 * identities (topic NULL). */
static void floor_send(const struct floor_wire *w, void *sock, const char *topic, zmq_msg_t *idents,
                       int nidents, const char *type, const char *parent, size_t parent_len,
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
        floor_uuid4(id);
        snprintf(header, sizeof(header),
                 "{\"msg_id\":\"%s\",\"session\":\"%s\",\"username\":\"kernel\",\"date\":\"%s\","
                 "\"msg_type\":\"%s\",\"version\":\"5.3\"}",
                 id, w->session, date, type);
        parts[0] = header;
        lens[0] = strlen(header);
        parts[1] = parent;
        lens[1] = parent_len;
        parts[2] = "{}";
        lens[2] = 2;
        parts[3] = content;
        lens[3] = strlen(content);
        floor_sign(w, parts, lens, sig);
        if (topic)
                zmq_send(sock, topic, strlen(topic), ZMQ_SNDMORE);
        for (int i = 0; !topic && i < nidents; i++) {
                zmq_msg_t copy;

                zmq_msg_init(&copy);
                zmq_msg_copy(&copy, &idents[i]);
                zmq_msg_send(&copy, sock, ZMQ_SNDMORE);
        }
        zmq_send(sock, FLOOR_DELIM, strlen(FLOOR_DELIM), ZMQ_SNDMORE);
        zmq_send(sock, sig, 64, ZMQ_SNDMORE);
        for (int i = 0; i < 4; i++)
                zmq_send(sock, parts[i], lens[i], i < 3 ? ZMQ_SNDMORE : 0);
}

static void floor_status(const struct floor_wire *w, void *iopub, const char *state,
                         const char *parent, size_t len)
{
        char content[64];

        snprintf(content, sizeof(content), "{\"execution_state\":\"%s\"}", state);
        floor_send(w, iopub, "kernel.status", NULL, 0, "status", parent, len, content);
}

/* One message read from sock into frames (*n of them, the caller's to
 * close); the index of its delimiter when it is a whole message whose
 * signature is right (parts: its header, parent, metadata and content),
 * else -1. */
static int floor_read(const struct floor_wire *w, void *sock, zmq_msg_t frames[FLOOR_MAX_FRAMES],
                      int *n, const char *parts[4], size_t lens[4])
{
        int delim = -1, more = 1;
        char sig[65];

        *n = 0;
        while (more && *n < FLOOR_MAX_FRAMES) {
                zmq_msg_init(&frames[*n]);
                if (zmq_msg_recv(&frames[*n], sock, 0) < 0) {
                        zmq_msg_close(&frames[*n]);
                        break;
                }
                more = zmq_msg_more(&frames[*n]);
                if (delim < 0 && zmq_msg_size(&frames[*n]) == strlen(FLOOR_DELIM) &&
                    memcmp(zmq_msg_data(&frames[*n]), FLOOR_DELIM, strlen(FLOOR_DELIM)) == 0)
                        delim = *n;
                (*n)++;
        }
        if (delim < 0 || *n < delim + 6)
                return -1;
        for (int i = 0; i < 4; i++) {
                parts[i] = zmq_msg_data(&frames[delim + 2 + i]);
                lens[i] = zmq_msg_size(&frames[delim + 2 + i]);
        }
        floor_sign(w, parts, lens, sig);
        if (zmq_msg_size(&frames[delim + 1]) != 64 ||
            memcmp(zmq_msg_data(&frames[delim + 1]), sig, 64) != 0)
                return -1;
        return delim;
}

#endif
