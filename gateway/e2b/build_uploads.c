#include "autoconf.h"

#include "gateway/e2b/build_internal.h"
#include "gateway/e2b/e2b.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The files a build copies are uploaded by the SDK to a URL the API gave
 * it, without its API key (the URL is all it has): signed here with a key
 * of this gateway's run, for one tenant's one hash, for an hour. They are
 * kept in STATE_DIR/templates/uploads/<tenant>/<hash>, a directory of the
 * tenant's (named by a hash of its name), within the tenant's bound
 * (--template-upload-max-mb, all its uploads together). */
#define UPLOADS_DIR   "uploads"
#define ROUTE_PREFIX  "template-uploads/"
#define URL_LIFETIME  3600
#define OWNER_DIR_LEN 32 /* hex digits of SHA-256(owner) naming its directory */
#define HASH_LEN      64
#define SIG_LEN       64

struct upload {
        int dir_fd;
        int fd;
        char name[HASH_LEN + 8];
        uint64_t written, limit;
};

static int uploads_fd = -1;
static char url_key[65];

int build_uploads_init(const char *templates_dir)
{
        int dir, rc = 0;

        if (jp_random_hex(url_key, 32) < 0)
                return -EIO;
        dir = open(templates_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0)
                return -errno;
        if (mkdirat(dir, UPLOADS_DIR, 0700) < 0 && errno != EEXIST)
                rc = -errno;
        if (rc == 0) {
                uploads_fd = openat(dir, UPLOADS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                                          O_CLOEXEC);
                if (uploads_fd < 0)
                        rc = -errno;
        }
        close(dir);
        return rc;
}

bool build_hash_valid(const char *hash)
{
        size_t n = strspn(hash, "0123456789abcdef");

        return n == HASH_LEN && hash[n] == '\0';
}

static void hex(const unsigned char *in, size_t len, char *out)
{
        static const char digits[] = "0123456789abcdef";

        for (size_t i = 0; i < len; i++) {
                out[2 * i] = digits[in[i] >> 4];
                out[2 * i + 1] = digits[in[i] & 15];
        }
        out[2 * len] = '\0';
}

/* The directory name of owner's uploads. */
static void owner_dir(const char *owner, char out[OWNER_DIR_LEN + 1])
{
        unsigned char md[SHA256_DIGEST_LENGTH];
        char full[2 * SHA256_DIGEST_LENGTH + 1];

        SHA256((const unsigned char *)owner, strlen(owner), md);
        hex(md, sizeof(md), full);
        memcpy(out, full, OWNER_DIR_LEN);
        out[OWNER_DIR_LEN] = '\0';
}

static void sign(const char *dir, const char *hash, long long expires, char out[SIG_LEN + 1])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        char text[OWNER_DIR_LEN + HASH_LEN + 32];

        snprintf(text, sizeof(text), "%s/%s/%lld", dir, hash, expires);
        HMAC(EVP_sha256(), url_key, (int)strlen(url_key), (const unsigned char *)text,
             strlen(text), md, &len);
        hex(md, 32, out);
}

char *build_upload_url(struct http_request *r, const char *owner, const char *hash)
{
        const struct config *cfg = build_config();
        long long expires = (long long)time(NULL) + URL_LIFETIME;
        char dir[OWNER_DIR_LEN + 1], sig[SIG_LEN + 1], host[256] = "";
        char *url = NULL;

        /* The Host the SDK reached us by (checked against --allow-host). */
        if (lws_hdr_copy(r->wsi, host, sizeof(host), WSI_TOKEN_HOST) <= 0 ||
            strpbrk(host, "/?#@ "))
                snprintf(host, sizeof(host), "localhost");
        owner_dir(owner, dir);
        sign(dir, hash, expires, sig);
        if (asprintf(&url, "%s://%s%se2b/" ROUTE_PREFIX "%s/%s?expires=%lld&signature=%s",
                     cfg->certfile && cfg->certfile[0] ? "https" : "http", host, cfg->base_url,
                     dir, hash, expires, sig) < 0)
                return NULL;
        return url;
}

static int open_owner_dir(const char *dir, bool make)
{
        int fd;

        if (uploads_fd < 0)
                return -ENODEV;
        if (make && mkdirat(uploads_fd, dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        fd = openat(uploads_fd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

bool build_upload_present(const char *owner, const char *hash)
{
        char dir[OWNER_DIR_LEN + 1];
        struct stat st;
        int fd;
        bool present;

        if (!build_hash_valid(hash))
                return false;
        owner_dir(owner, dir);
        fd = open_owner_dir(dir, false);
        if (fd < 0)
                return false;
        present = fstatat(fd, hash, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
        close(fd);
        return present;
}

int build_upload_open(const char *owner, const char *hash)
{
        char dir[OWNER_DIR_LEN + 1];
        int fd, file;

        if (!build_hash_valid(hash))
                return -EINVAL;
        owner_dir(owner, dir);
        fd = open_owner_dir(dir, false);
        if (fd < 0)
                return fd;
        file = openat(fd, hash, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (file < 0)
                file = -errno;
        close(fd);
        return file;
}

/* Bytes of the files in dir_fd (the tenant's uploads so far). */
static uint64_t dir_bytes(int dir_fd)
{
        int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 3);
        uint64_t total = 0;
        struct dirent *de;
        struct stat st;
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return 0;
        }
        while ((de = readdir(d)) != NULL) {
                if (fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode))
                        total += (uint64_t)st.st_blocks * 512;
        }
        closedir(d);
        return total;
}

/* "template-uploads/<dir>/<hash>": the two parts, checked. */
static bool parse_route(const char *route, char dir[OWNER_DIR_LEN + 1], char hash[HASH_LEN + 1])
{
        const char *p = route + strlen(ROUTE_PREFIX);
        size_t n = strspn(p, "0123456789abcdef");

        if (n != OWNER_DIR_LEN || p[n] != '/')
                return false;
        memcpy(dir, p, n);
        dir[n] = '\0';
        p += n + 1;
        if (!build_hash_valid(p))
                return false;
        memcpy(hash, p, HASH_LEN + 1);
        return true;
}

static bool is_upload(const char *route)
{
        return strncmp(route, ROUTE_PREFIX, strlen(ROUTE_PREFIX)) == 0;
}

bool builds_upload_admit(struct http_request *r, const char *route, bool *ok)
{
        char dir[OWNER_DIR_LEN + 1], hash[HASH_LEN + 1], sig[SIG_LEN + 1], given_text[SIG_LEN + 16];
        char expires_text[48];
        const char *given, *expires_value;
        long long expires;
        char *end;

        if (!is_upload(route))
                return false;
        *ok = false;
        if (r->method != HTTP_PUT) {
                e2b_reply_error(r, 405, "an upload is a PUT");
                return true;
        }
        /* (lws gives each value's start within its buffer) */
        expires_value = lws_get_urlarg_by_name(r->wsi, "expires=", expires_text,
                                               sizeof(expires_text));
        given = lws_get_urlarg_by_name(r->wsi, "signature=", given_text, sizeof(given_text));
        if (!parse_route(route, dir, hash) || !expires_value || !given) {
                e2b_reply_error(r, 400, "not an upload URL this gateway gave");
                return true;
        }
        errno = 0;
        expires = strtoll(expires_value, &end, 10);
        sign(dir, hash, expires, sig);
        if (errno || *end || strlen(given) != SIG_LEN ||
            CRYPTO_memcmp(sig, given, SIG_LEN) != 0) {
                e2b_reply_error(r, 403, "the upload URL's signature is wrong");
                return true;
        }
        if (expires < (long long)time(NULL)) {
                e2b_reply_error(r, 403, "the upload URL has expired: ask for a new one");
                return true;
        }
        *ok = true;
        return true;
}

static void upload_cleanup(struct http_request *r)
{
        struct upload *u = r->ctx;

        if (!u)
                return;
        if (u->fd >= 0) {
                /* Not finished: nothing half-written stays. */
                close(u->fd);
                unlinkat(u->dir_fd, u->name, 0);
        }
        close(u->dir_fd);
        free(u);
        r->ctx = NULL;
}

static int upload_body(struct http_request *r, const uint8_t *data, size_t len)
{
        struct upload *u = r->ctx;

        if (u->written + len > u->limit) {
                e2b_reply_error(r, 413,
                                "the upload is past this key's room for files to copy "
                                "(--template-upload-max-mb %lld)",
                                (long long)build_config()->template_upload_max_mb);
                return -1;
        }
        while (len) {
                ssize_t n = write(u->fd, data, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        e2b_reply_error(r, 507, "cannot store the upload: %s", strerror(errno));
                        return -1;
                }
                data += n;
                len -= (size_t)n;
                u->written += (uint64_t)n;
        }
        return 0;
}

bool builds_upload_prepare(struct http_request *r, const char *route)
{
        uint64_t room = (uint64_t)build_config()->template_upload_max_mb << 20, used;
        char dir[OWNER_DIR_LEN + 1], hash[HASH_LEN + 1];
        struct upload *u;

        if (!is_upload(route))
                return false;
        if (!parse_route(route, dir, hash))
                return true; /* admit answered */
        u = calloc(1, sizeof(*u));
        if (!u) {
                e2b_reply_error(r, 500, "out of memory");
                return true;
        }
        u->fd = -1;
        u->dir_fd = open_owner_dir(dir, true);
        if (u->dir_fd < 0) {
                e2b_reply_error(r, 500, "cannot store uploads: %s", strerror(-u->dir_fd));
                free(u);
                return true;
        }
        used = dir_bytes(u->dir_fd);
        u->limit = used < room ? room - used : 0;
        snprintf(u->name, sizeof(u->name), "%s.new", hash);
        unlinkat(u->dir_fd, u->name, 0);
        u->fd = openat(u->dir_fd, u->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       0600);
        r->ctx = u;
        r->cleanup = upload_cleanup;
        if (u->fd < 0) {
                e2b_reply_error(r, 500, "cannot store the upload: %s", strerror(errno));
                return true;
        }
        r->body_fn = upload_body;
        return true;
}

bool builds_upload_handle(struct http_request *r, const char *route)
{
        char dir[OWNER_DIR_LEN + 1], hash[HASH_LEN + 1];
        struct upload *u = r->ctx;

        if (!is_upload(route))
                return false;
        if (!u || u->fd < 0 || !parse_route(route, dir, hash)) {
                if (!r->responded)
                        e2b_reply_error(r, 500, "the upload was not taken");
                return true;
        }
        if (fsync(u->fd) < 0 || renameat(u->dir_fd, u->name, u->dir_fd, hash) < 0) {
                e2b_reply_error(r, 507, "cannot store the upload: %s", strerror(errno));
                return true;
        }
        close(u->fd);
        u->fd = -1;
        http_reply_empty(r, 200);
        return true;
}
