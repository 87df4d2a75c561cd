/* kernel-host/checkpoint_copy.c: a fork's copy of a checkpoint under host
 * ids of its own. The user namespace's image is rewritten from the
 * source's ids to the copy's; the bytes expected are a real CRIU 4.2
 * userns image (its uid and gid maps of a sandbox as dumped here) and the
 * same maps encoded by Python for the new ids (varints of another length,
 * so the entry's size changes too). Anything but the source's two ids, or
 * a malformed image, is refused. The owners of an unpacked top are shifted
 * (as root: lchown). */
#include "kernel-host/checkpoint_copy.c"

#include "tests/unit/tap.h"
#include "tests/unit/tmpdir.h"

#include <sys/stat.h>

static const char DUMPED[] = "1943565406494755320000000a0a080010c084d1980318010a0b08e80710c184d1"
                             "98031801120a080010c084d198031801120b08e80710c184d198031801";
static const char COPIED[] = "19435654064947552a0000000a08080010c0843d18010a0908e80710c1843d1801"
                             "1208080010c0843d1801120908e80710c1843d1801";

static const struct sandbox_ids source = {.setup_uid = 856965696,
                                          .user_uid = 856965697,
                                          .setup_gid = 856965696,
                                          .user_gid = 856965697,
                                          .privileged = true};
static const struct sandbox_ids copy = {.setup_uid = 1000000,
                                        .user_uid = 1000001,
                                        .setup_gid = 1000000,
                                        .user_gid = 1000001,
                                        .privileged = true};

static size_t unhex(const char *hex, uint8_t *out)
{
        size_t n = strlen(hex) / 2;

        for (size_t i = 0; i < n; i++)
                sscanf(hex + 2 * i, "%2hhx", &out[i]);
        return n;
}

/* Rewrites image (hex) through two pipes: 0 and the result into out, or
 * the error. */
static int rewrite(const char *hex, uint8_t *out, size_t *outlen)
{
        uint8_t in[512];
        size_t n = unhex(hex, in);
        int a[2], b[2], rc;
        ssize_t got;

        if (pipe(a) < 0 || pipe(b) < 0)
                return -errno;
        if (write(a[1], in, n) != (ssize_t)n)
                return -EIO;
        close(a[1]);
        shift_from = &source;
        shift_to = &copy;
        rc = userns_rewrite(a[0], b[1]);
        close(a[0]);
        close(b[1]);
        got = read(b[0], out, 512);
        close(b[0]);
        *outlen = got > 0 ? (size_t)got : 0;
        return rc;
}

static void test_userns_image(void)
{
        uint8_t out[512], want[512];
        size_t len = 0, wantlen = unhex(COPIED, want);
        char bad[sizeof(DUMPED)];

        is_int(rewrite(DUMPED, out, &len), 0, "CRIU's userns image is rewritten");
        ok(len == wantlen && memcmp(out, want, len) == 0,
           "to the maps of the copy's ids, the entry's size following its varints");
        /* An id that is not the source's: not an image we made. */
        snprintf(bad, sizeof(bad), "%s", DUMPED);
        memcpy(strstr(bad, "c084d19803"), "c084d19804", 10);
        is_int(rewrite(bad, out, &len), -EBADMSG, "a map to another host id is refused");
        is_int(rewrite("194356540649475532000000", out, &len), -EBADMSG,
           "an entry longer than the file is refused");
        is_int(rewrite("1943565406494755050000000a03080010", out, &len), -EBADMSG,
           "a truncated extent is refused");
        is_int(rewrite("19435654", out, &len), -EBADMSG, "a file shorter than its magic");
}

static void test_owners(void)
{
        char dir[] = "/tmp/glovebox-copy-XXXXXX", path[64];
        struct stat st;

        /* Without root only the image is checked (connfile's tests do so). */
        if (geteuid() != 0) {
                diag("not root: the owners' shift is not checked");
                return;
        }
        if (!mkdtemp(dir))
                BAIL_OUT("mkdtemp: %s", strerror(errno));
        snprintf(path, sizeof(path), "%s/home", dir);
        ok(mkdir(path, 0755) == 0 && chown(path, source.user_uid, source.user_gid) == 0,
           "a home of the source's user");
        snprintf(path, sizeof(path), "%s/home/setgid", dir);
        close(open(path, O_CREAT | O_WRONLY, 0644));
        ok(chown(path, source.setup_uid, source.user_gid) == 0 && chmod(path, 02755) == 0,
           "a set-group-id file of its root's");
        snprintf(path, sizeof(path), "%s/other", dir);
        close(open(path, O_CREAT | O_WRONLY, 0644));
        ok(chown(path, 4242, 4242) == 0, "a file of nobody's ids");
        is_int(checkpoint_copy_owners(dir, &source, &copy), 0, "the owners are shifted");
        snprintf(path, sizeof(path), "%s/home", dir);
        ok(stat(path, &st) == 0 && st.st_uid == copy.user_uid && st.st_gid == copy.user_gid,
           "the user's become the copy's user's");
        snprintf(path, sizeof(path), "%s/home/setgid", dir);
        ok(stat(path, &st) == 0 && st.st_uid == copy.setup_uid &&
               st.st_gid == copy.user_gid && (st.st_mode & 07777) == 02755,
           "root's become the copy's root's, set-id bits kept");
        snprintf(path, sizeof(path), "%s/other", dir);
        ok(stat(path, &st) == 0 && st.st_uid == 4242, "an id not the source's is left as it is");
        tmpdir_remove(dir);
}

/* A copy's image directory: the source's images under the same names,
 * each the checkpoint's own file (a hard link: no inode of its own), the
 * user namespace's image rewritten into a file of its own, other copies'
 * directories left out. */
static void test_images_dir(void)
{
        char dir[] = "/tmp/glovebox-images-XXXXXX", path[PATH_MAX], images[PATH_MAX];
        static const char *const names[] = {"core-1.img", "pages-1.img", "files.tar"};
        uint8_t image[512];
        size_t n = unhex(DUMPED, image);
        struct stat src, dst;
        int fd;

        if (!mkdtemp(dir))
                BAIL_OUT("mkdtemp: %s", strerror(errno));
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
                fd = open(path, O_CREAT | O_WRONLY, 0644);
                ok(fd >= 0 && write(fd, names[i], strlen(names[i])) > 0, "image %s", names[i]);
                close(fd);
        }
        snprintf(path, sizeof(path), "%s/userns-11.img", dir);
        fd = open(path, O_CREAT | O_WRONLY, 0644);
        ok(fd >= 0 && write(fd, image, n) == (ssize_t)n, "a user namespace's image as dumped");
        close(fd);
        snprintf(path, sizeof(path), "%s/copy-other", dir);
        ok(mkdir(path, 0711) == 0, "another copy's directory beside them");
        snprintf(images, sizeof(images), "%s", dir);
        is_int(checkpoint_images_dir(images, sizeof(images), "mine", &source, &copy), 0,
               "the copy's image directory is made");
        snprintf(path, sizeof(path), "%s/copy-mine", dir);
        is_str(images, path, "its path is given back");
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                char own[PATH_MAX + 32];

                snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
                snprintf(own, sizeof(own), "%s/%s", images, names[i]);
                ok(stat(path, &src) == 0 && lstat(own, &dst) == 0 && S_ISREG(dst.st_mode) &&
                       dst.st_ino == src.st_ino && dst.st_dev == src.st_dev && src.st_nlink == 2,
                   "%s is the checkpoint's own file under a second name", names[i]);
        }
        snprintf(path, sizeof(path), "%s/userns-11.img", dir);
        {
                char own[PATH_MAX + 32];
                uint8_t got[512], want[512];
                size_t wantlen = unhex(COPIED, want);
                ssize_t len;

                snprintf(own, sizeof(own), "%s/userns-11.img", images);
                fd = open(own, O_RDONLY);
                len = fd >= 0 ? read(fd, got, sizeof(got)) : -1;
                close(fd);
                ok(stat(path, &src) == 0 && lstat(own, &dst) == 0 && dst.st_ino != src.st_ino &&
                       len == (ssize_t)wantlen && memcmp(got, want, wantlen) == 0,
                   "the user namespace's image is a file of its own, with the copy's ids");
                snprintf(own, sizeof(own), "%s/copy-other", images);
                ok(lstat(own, &dst) < 0 && errno == ENOENT, "another copy's directory is left out");
        }
        fd = open("/tmp", O_RDONLY | O_DIRECTORY);
        checkpoint_images_dir_remove(fd, dir + strlen("/tmp/"), "mine");
        close(fd);
        snprintf(path, sizeof(path), "%s/core-1.img", dir);
        ok(access(images, F_OK) < 0 && stat(path, &src) == 0 && src.st_nlink == 1,
           "removed, it leaves the checkpoint's images as they were");
        tmpdir_remove(dir);
}

int main(void)
{
        test_userns_image();
        test_owners();
        test_images_dir();
        return done_testing();
}
