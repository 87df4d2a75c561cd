/* kernel-host/checkpoint_files.c: the files a sandbox's processes map or
 * hold open, and the mount each is on. link_mnt_id (statx through the
 * /proc link) must name the same mount as the file's own fdinfo does,
 * for every mapping and descriptor of this process; a walk of a process
 * whose files are all on its own mounts finds none from outside. */
#include "kernel-host/checkpoint_files.c"

#include "tests/unit/tap.h"

#include <sys/mman.h>

/* checkpoint_foreign_open's, in checkpoint_restore.c: not reached by what
 * is tested here, so never true. */
bool checkpoint_json_uint(json_t *o, const char *key, unsigned long long max,
                          unsigned long long *out)
{
        (void)o;
        (void)key;
        (void)max;
        (void)out;
        return false;
}

/* The mount id fdinfo gives for the file link leads to, opened here. */
static int opened_mnt_id(const char *link)
{
        char info[64];
        int fd = open(link, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY), id;

        if (fd < 0)
                return -1;
        snprintf(info, sizeof(info), "/proc/self/fdinfo/%d", fd);
        id = mnt_id_of(info);
        close(fd);
        return id;
}

static void test_mappings(void)
{
        /* A mapping of a file on another mount than the program's. */
        int memfd = memfd_create("mapped", MFD_CLOEXEC);
        void *map = memfd >= 0 && ftruncate(memfd, 4096) == 0
                        ? mmap(NULL, 4096, PROT_READ, MAP_SHARED, memfd, 0)
                        : MAP_FAILED;
        DIR *dir = opendir("/proc/self/map_files");
        struct dirent *de;
        int n = 0, same = 0, different_mounts = 0, first = -1;

        if (!dir) {
                diag("no /proc/self/map_files here (not root?): mappings not checked");
                return;
        }
        while ((de = readdir(dir))) {
                char link[PATH_MAX];
                int want, got;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(link, sizeof(link), "/proc/self/map_files/%s", de->d_name);
                want = opened_mnt_id(link);
                got = link_mnt_id(link, NULL);
                n++;
                same += want >= 0 && got == want;
                if (first < 0)
                        first = got;
                different_mounts += got != first;
        }
        closedir(dir);
        ok(n > 5 && map != MAP_FAILED, "this process maps %d files, one of them a memfd's", n);
        is_int(same, n, "each mapping's mount is the one its file's fdinfo names");
        ok(different_mounts > 0, "%d of them on a mount other than the first's", different_mounts);
        munmap(map, 4096);
        close(memfd);
        is_int(link_mnt_id("/proc/self/map_files/1-2", NULL), -1, "a mapping that is not: -1");
}

static void test_descriptors(void)
{
        int fds[2];
        int file = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        int n = 0, same = 0;
        DIR *dir;
        struct dirent *de;

        ok(pipe(fds) == 0 && file >= 0, "a pipe and a file of /proc open");
        dir = opendir("/proc/self/fd");
        while (dir && (de = readdir(dir))) {
                char link[PATH_MAX], info[96];

                if (de->d_name[0] == '.')
                        continue;
                snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
                snprintf(info, sizeof(info), "/proc/self/fdinfo/%s", de->d_name);
                /* The directory's own descriptor is read as it is listed. */
                if (atoi(de->d_name) == dirfd(dir))
                        continue;
                n++;
                same += link_mnt_id(link, info) == mnt_id_of(info);
        }
        if (dir)
                closedir(dir);
        ok(n >= 5, "%d descriptors", n);
        is_int(same, n, "each descriptor's mount is the one its fdinfo names");
        close(fds[0]);
        close(fds[1]);
        close(file);
}

static void test_own_process(void)
{
        char err[256] = "";
        json_t *files;

        if (geteuid() != 0) {
                diag("not root: the walk of a process is not checked");
                return;
        }
        files = checkpoint_foreign_files(getpid(), err, sizeof(err));
        ok(json_is_object(files) && json_object_size(files) == 0,
           "a process whose files are all on its own mounts has none from outside (%s)", err);
        json_decref(files);
}

int main(void)
{
        test_mappings();
        test_descriptors();
        test_own_process();
        return done_testing();
}
