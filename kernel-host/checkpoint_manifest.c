/* What a checkpoint's restore trusts, sealed at its dump: manifest.json
 * names every file of the checkpoint with its SHA-256, and an HMAC-SHA256
 * of that list under a key of the kernel-host's own (.manifest-key, 0600
 * in the checkpoints' directory, made at its first start). A restore
 * refuses a checkpoint whose files are not exactly those, as they were:
 * CRIU, run as root, takes its images' word for the namespaces, mounts,
 * credentials and seccomp filters it restores, and tar puts back what
 * files.tar holds. The pages' contents (pages-*.img) are left out: they
 * are the sandbox's own memory, which its own code could have written
 * anything into, and hashing them would cost about 0.6 ms per MiB on both
 * sides; which pages go where (pagemap-*.img) is sealed. So are the
 * pages' compressed forms (pages-*.img.zst, and .zst.tmp while one is
 * written: checkpoint_pages.c), made after the seal; what is sealed about
 * them is pages.json, each page file's size at the dump, which bounds
 * what a restore decompresses. */
#include "autoconf.h"

#include "kernel-host/checkpoint_internal.h"
#include "protocol/buf.h"
#include "protocol/ids.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_FILE "." "manifest-key"
#define MANIFEST "manifest.json"
#define KEY_LEN  32
/* A file and its digest per line: room for some 100,000 images. */
#define MANIFEST_MAX (16 << 20)

static unsigned char key[KEY_LEN];
static bool have_key;

int checkpoint_key_init(int dir_fd)
{
        int fd = openat(dir_fd, KEY_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0 && errno == ENOENT) {
                fd = openat(dir_fd, KEY_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            0600);
                if (fd < 0 || jp_random_bytes(key, sizeof(key)) < 0 ||
                    write(fd, key, sizeof(key)) != (ssize_t)sizeof(key) || fsync(fd) < 0) {
                        if (fd >= 0)
                                close(fd);
                        unlinkat(dir_fd, KEY_FILE, 0);
                        return -EIO;
                }
                close(fd);
                fsync(dir_fd);
                have_key = true;
                return 0;
        }
        if (fd < 0)
                return -errno;
        have_key = read(fd, key, sizeof(key)) == (ssize_t)sizeof(key);
        close(fd);
        return have_key ? 0 : -EBADMSG;
}

/* Whether name is one the manifest leaves out: itself, CRIU's logs and
 * statistics (written beside the images, the restore's too), the pages
 * in any of their forms. */
static bool left_out(const char *name)
{
        size_t n = strlen(name);

        return strcmp(name, MANIFEST) == 0 || strncmp(name, "stats-", 6) == 0 ||
               (n > 4 && strcmp(name + n - 4, ".log") == 0) ||
               checkpoint_pages_form(name, NULL, 0) != PAGES_NOT;
}

static int file_sha256(int dir_fd, const char *name, char hex[65])
{
        unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
        int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        unsigned int len = 0;
        ssize_t n = 0;
        int rc = -EIO;

        if (fd >= 0 && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1) {
                while ((n = read(fd, buf, sizeof(buf))) > 0)
                        EVP_DigestUpdate(ctx, buf, (size_t)n);
                if (n == 0 && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == 32) {
                        for (unsigned i = 0; i < 32; i++)
                                snprintf(hex + 2 * i, 3, "%02x", md[i]);
                        rc = 0;
                }
        }
        EVP_MD_CTX_free(ctx);
        if (fd >= 0)
                close(fd);
        return rc;
}

static int by_name(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* {name: sha256} of every file dir_fd holds but those left out; NULL on
 * an error, or when it holds anything but regular files and directories
 * (a copy's image directory, left out too). */
static json_t *digests(int dir_fd)
{
        int fd = dup(dir_fd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        json_t *out = json_object();
        struct dirent *e;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                json_decref(out);
                return NULL;
        }
        rewinddir(d);
        while (out && (e = readdir(d))) {
                struct stat st;
                char hex[65];

                if (e->d_name[0] == '.' || left_out(e->d_name))
                        continue;
                if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        /* A copy's image directory, made and removed beside
                         * the sealed files as a fork's copies restore: one
                         * gone since the listing is one that went. */
                        if (errno == ENOENT && strncmp(e->d_name, "copy-", 5) == 0)
                                continue;
                        json_decref(out);
                        out = NULL;
                } else if ((!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) ||
                           (S_ISDIR(st.st_mode) && strncmp(e->d_name, "copy-", 5) != 0)) {
                        json_decref(out);
                        out = NULL;
                } else if (S_ISREG(st.st_mode) &&
                           (file_sha256(dir_fd, e->d_name, hex) < 0 ||
                            json_object_set_new(out, e->d_name, json_string(hex)) < 0)) {
                        json_decref(out);
                        out = NULL;
                }
        }
        closedir(d);
        return out;
}

/* The HMAC of the list, names in order: "name\0sha256\n" each. */
static int seal(json_t *files, char hex[65])
{
        size_t count = json_object_size(files), n = 0, total = 0, at = 0;
        const char **names = calloc(count + 1, sizeof(char *));
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        const char *name;
        char *text = NULL;
        json_t *v;
        int rc = -EIO;

        if (!names || !have_key)
                goto out;
        json_object_foreach(files, name, v) {
                names[n++] = name;
                total += strlen(name) + 1 + strlen(json_string_value(v) ?: "") + 1;
        }
        qsort(names, n, sizeof(names[0]), by_name);
        text = malloc(total + 1);
        if (!text)
                goto out;
        for (size_t i = 0; i < n; i++) {
                const char *h = json_string_value(json_object_get(files, names[i])) ?: "";

                memcpy(text + at, names[i], strlen(names[i]) + 1);
                at += strlen(names[i]) + 1;
                memcpy(text + at, h, strlen(h));
                at += strlen(h);
                text[at++] = '\n';
        }
        if (HMAC(EVP_sha256(), key, sizeof(key), (const unsigned char *)text, at, mac, &len) &&
            len == 32) {
                for (unsigned i = 0; i < 32; i++)
                        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
                rc = 0;
        }
out:
        free(text);
        free(names);
        return rc;
}

int checkpoint_manifest_write(int dir_fd)
{
        json_t *files = digests(dir_fd), *manifest = NULL;
        char mac[65], *text = NULL;
        int fd = -1, rc = -EIO;

        if (!files || seal(files, mac) < 0)
                goto out;
        manifest = json_pack("{s:i, s:O, s:s}", "version", 1, "files", files, "hmac", mac);
        text = manifest ? json_dumps(manifest, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        fd = text ? openat(dir_fd, MANIFEST, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                           0644)
                  : -1;
        if (fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text))
                rc = 0;
out:
        if (fd >= 0)
                close(fd);
        free(text);
        json_decref(manifest);
        json_decref(files);
        return rc;
}

/* Makes every file of dir durable, then dir. CRIU's checkpoint_dir become
 * readable by the ids of the sandbox being restored, which open them
 * through CRIU's descriptor of the directory: the directory above is ours
 * alone (0700), and no sandbox sees any of it. */
static int sync_dir(int dir_fd)
{
        int fd = dup(dir_fd), rc = 0;
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;

        if (!d)
                return -1;
        while ((e = readdir(d))) {
                int f;

                if (e->d_type != DT_REG)
                        continue;
                f = openat(dir_fd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (f < 0 || fsync(f) < 0)
                        rc = -1;
                else if (strcmp(e->d_name, ARCHIVE) != 0 && strcmp(e->d_name, RECORD) != 0 &&
                         fchmod(f, 0644) < 0)
                        rc = -1;
                if (f >= 0)
                        close(f);
        }
        closedir(d);
        return rc < 0 || fchmod(dir_fd, 0711) < 0 || fsync(dir_fd) < 0 ? -1 : 0;
}

int checkpoint_seal(int dir_fd)
{
        return checkpoint_manifest_write(dir_fd) < 0 || sync_dir(dir_fd) < 0 ? -EIO : 0;
}

/* The manifest, if its seal holds (the caller decrefs); NULL else. */
static json_t *manifest_read(int dir_fd)
{
        int fd = openat(dir_fd, MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        json_t *manifest = fd >= 0 ? json_read_fd(fd, MANIFEST_MAX, 0, NULL) : NULL;
        const char *mac = json_string_value(json_object_get(manifest, "hmac"));
        char expect[65];

        if (fd >= 0)
                close(fd);
        if (!json_is_object(json_object_get(manifest, "files")) || !mac || strlen(mac) != 64 ||
            seal(json_object_get(manifest, "files"), expect) < 0 ||
            CRYPTO_memcmp(expect, mac, 64) != 0) {
                json_decref(manifest);
                return NULL;
        }
        return manifest;
}

int checkpoint_manifest_check_file(int dir_fd, const char *name)
{
        json_t *manifest = manifest_read(dir_fd);
        const char *want = json_string_value(
            json_object_get(json_object_get(manifest, "files"), name));
        char hex[65];
        int rc = want && file_sha256(dir_fd, name, hex) == 0 && strcmp(hex, want) == 0
                     ? 0
                     : -EBADMSG;

        json_decref(manifest);
        return rc;
}

int checkpoint_manifest_check(int dir_fd)
{
        json_t *manifest = manifest_read(dir_fd);
        json_t *now = manifest ? digests(dir_fd) : NULL;
        int rc = now && json_equal(now, json_object_get(manifest, "files")) ? 0 : -EBADMSG;

        json_decref(now);
        json_decref(manifest);
        return rc;
}
