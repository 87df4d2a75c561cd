/* Signature vectors from Debian's jupyter_client (tests/unit/gen-vectors.py).
 *
 * For every message that jupyter_client's Session signed, the wire decoder
 * must accept it, the signer must reproduce its signature byte for byte, the
 * encoder must lay out the very same frames, and changing any one byte of a
 * signed part must make verification fail. The file is named by
 * GLOVEBOX_VECTORS; make check generates it. */
#include "autoconf.h"

#include "protocol/sign.h"
#include "protocol/wire.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>

struct vector {
        const char *name;
        uint8_t *key;
        size_t keylen;
        size_t nframes;
        uint8_t *frame_data[JP_WIRE_MAX_FRAMES];
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        size_t nidentities;
        size_t nbuffers;
        const char *signature;
};

static int b64_value(char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

/* Decodes padded base64 into a fresh allocation (caller frees); -EINVAL
 * for anything malformed, so a broken vectors file is noticed. */
static int b64_decode(const char *in, uint8_t **out, size_t *outlen)
{
        size_t len = strlen(in);
        size_t o = 0;
        uint8_t *p;

        if (len % 4)
                return -EINVAL;
        p = malloc(len / 4 * 3 + 1);
        if (!p)
                return -ENOMEM;
        for (size_t i = 0; i < len; i += 4) {
                int v[4];

                for (int j = 0; j < 4; j++)
                        v[j] =
                            in[i + j] == '=' && i + 4 == len && j >= 2 ? 0 : b64_value(in[i + j]);
                if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) {
                        free(p);
                        return -EINVAL;
                }
                p[o++] = (uint8_t)(v[0] << 2 | v[1] >> 4);
                if (in[i + 2] != '=')
                        p[o++] = (uint8_t)((v[1] & 15) << 4 | v[2] >> 2);
                if (in[i + 3] != '=')
                        p[o++] = (uint8_t)((v[2] & 3) << 6 | v[3]);
        }
        *out = p;
        *outlen = o;
        return 0;
}

static int load_vector(json_t *j, struct vector *v)
{
        json_t *frames = json_object_get(j, "frames");
        json_t *f;
        size_t i;

        memset(v, 0, sizeof(*v));
        v->name = json_string_value(json_object_get(j, "name"));
        v->signature = json_string_value(json_object_get(j, "signature"));
        v->nidentities = (size_t)json_integer_value(json_object_get(j, "nidentities"));
        v->nbuffers = (size_t)json_integer_value(json_object_get(j, "nbuffers"));
        if (!v->name || !v->signature || !json_is_array(frames) ||
            json_array_size(frames) > JP_WIRE_MAX_FRAMES ||
            !json_is_string(json_object_get(j, "key")))
                return -EINVAL;
        if (b64_decode(json_string_value(json_object_get(j, "key")), &v->key, &v->keylen) < 0)
                return -EINVAL;
        json_array_foreach(frames, i, f)
        {
                size_t len;

                if (!json_is_string(f) ||
                    b64_decode(json_string_value(f), &v->frame_data[i], &len) < 0)
                        return -EINVAL;
                v->frames[i] = (struct jp_bytes){v->frame_data[i], len};
                v->nframes = i + 1;
        }
        return 0;
}

static void free_vector(struct vector *v)
{
        free(v->key);
        for (size_t i = 0; i < v->nframes; i++)
                free(v->frame_data[i]);
}

/* Flips one bit in each byte of frame `which` in turn and counts how many of
 * those changes verification still accepts. */
static size_t count_accepted_mutations(struct vector *v, struct jp_signer *signer, size_t which,
                                       size_t *tried)
{
        size_t accepted = 0;
        uint8_t *p = v->frame_data[which];

        *tried = 0;
        for (size_t i = 0; i < v->frames[which].len; i++) {
                struct jp_msg msg;

                p[i] ^= 0x01;
                jp_msg_init(&msg);
                if (jp_wire_decode(v->frames, v->nframes, signer, &msg) != -EACCES)
                        accepted++;
                p[i] ^= 0x01;
                (*tried)++;
        }
        return accepted;
}

static void check_vector(struct vector *v)
{
        static const char *const part_names[4] = {"header", "parent_header", "metadata", "content"};
        struct jp_bytes out[JP_WIRE_MAX_FRAMES];
        char signature[JP_SIGNATURE_HEX_LEN + 1];
        char resigned[JP_SIGNATURE_HEX_LEN + 1];
        struct jp_signer *signer = NULL;
        struct jp_msg msg;
        size_t delim = v->nidentities;
        int n;

        if (jp_signer_new(v->key, v->keylen, &signer) < 0)
                BAIL_OUT("cannot create a signer for %s", v->name);
        jp_msg_init(&msg);
        is_int(jp_wire_decode(v->frames, v->nframes, signer, &msg), 0,
               "%s: jupyter_client's message verifies", v->name);
        is_uint(msg.nidentities, v->nidentities, "%s: identities", v->name);
        is_uint(msg.nbuffers, v->nbuffers, "%s: buffers", v->name);
        is_int(jp_signer_sign(signer, &msg, signature), 0, "%s: signs", v->name);
        is_str(signature, v->signature, "%s: signature is byte for byte jupyter_client's", v->name);
        is_mem(v->frames[delim + 1].ptr, v->frames[delim + 1].len, v->signature,
               strlen(v->signature), "%s: the signature frame is the recorded one", v->name);

        n = jp_wire_encode(&msg, signer, resigned, out);
        ok(n >= 0 && (size_t)n == v->nframes, "%s: re-encodes into %zu frames (got %d)", v->name,
           v->nframes, n);
        if (n >= 0 && (size_t)n == v->nframes) {
                size_t same = 0;

                for (size_t i = 0; i < v->nframes; i++)
                        same += out[i].len == v->frames[i].len &&
                                memcmp(out[i].ptr, v->frames[i].ptr, out[i].len) == 0;
                is_uint(same, v->nframes, "%s: re-encoded frames equal jupyter_client's", v->name);
        } else {
                ok(0, "%s: re-encoded frames equal jupyter_client's", v->name);
        }

        if (v->keylen > 0) {
                for (size_t p = 0; p < 4; p++) {
                        size_t tried;
                        size_t accepted =
                            count_accepted_mutations(v, signer, delim + 2 + p, &tried);

                        ok(tried > 0 && accepted == 0,
                           "%s: each of %zu one-byte changes to %s is rejected (%zu accepted)",
                           v->name, tried, part_names[p], accepted);
                }
                {
                        size_t tried;
                        size_t accepted = count_accepted_mutations(v, signer, delim + 1, &tried);

                        ok(tried == JP_SIGNATURE_HEX_LEN && accepted == 0,
                           "%s: each of %zu one-byte changes to the signature is rejected", v->name,
                           tried);
                }
        } else {
                struct jp_signer *keyed = NULL;
                struct jp_msg other;

                is_str(v->signature, "", "%s: an empty key gives an empty signature", v->name);
                if (jp_signer_new("k", 1, &keyed) < 0)
                        BAIL_OUT("cannot create a signer");
                jp_msg_init(&other);
                is_int(jp_wire_decode(v->frames, v->nframes, keyed, &other), -EACCES,
                       "%s: an unsigned message is rejected when a key is set", v->name);
                jp_signer_destroy(&keyed);
        }
        /* Buffers are not signed: changing one must still verify. */
        if (v->nbuffers > 0) {
                size_t b = v->nframes - 1;
                struct jp_msg again;

                ok(v->frames[b].len > 0, "%s: last buffer is not empty", v->name);
                if (v->frames[b].len > 0) {
                        v->frame_data[b][0] ^= 0xff;
                        jp_msg_init(&again);
                        is_int(jp_wire_decode(v->frames, v->nframes, signer, &again), 0,
                               "%s: a changed buffer still verifies (buffers are unsigned)",
                               v->name);
                        v->frame_data[b][0] ^= 0xff;
                }
        }
        jp_signer_destroy(&signer);
}

int main(void)
{
        const char *path = getenv("GLOVEBOX_VECTORS");
        json_error_t jerr;
        json_t *root, *vectors, *j;
        size_t i, nempty = 0, nbuffers = 0, nidentities = 0, nparent = 0;

        if (!path || !*path)
                BAIL_OUT("GLOVEBOX_VECTORS is not set (make check sets it)");
        root = json_load_file(path, 0, &jerr);
        if (!root)
                BAIL_OUT("cannot read %s: %s", path, jerr.text);
        diag("vectors from %s", json_string_value(json_object_get(root, "generator")));
        vectors = json_object_get(root, "vectors");
        ok(json_array_size(vectors) >= 5, "the file holds at least 5 vectors (%zu)",
           json_array_size(vectors));
        json_array_foreach(vectors, i, j)
        {
                struct vector v;

                if (load_vector(j, &v) < 0)
                        BAIL_OUT("vector %zu is malformed", i);
                nempty += v.keylen == 0;
                nbuffers += v.nbuffers > 0;
                nidentities += v.nidentities > 0;
                nparent += v.frames[v.nidentities + 3].len > 2;
                check_vector(&v);
                free_vector(&v);
        }
        /* The generator's coverage, so a change to it cannot quietly drop a case. */
        ok(nempty >= 1, "an empty-key vector is among them");
        ok(nbuffers >= 1, "a vector with buffers is among them");
        ok(nidentities >= 1, "a vector with identities is among them");
        ok(nparent >= 1, "a vector with a parent header is among them");
        json_decref(root);
        return done_testing();
}
