/* kernel-host/homecache.c: the links a new home gets to the host's shared
 * caches. An empty home gets a link to each file, in directories of its
 * own owned by the sandbox's user; a home with anything in it gets
 * nothing; a link planted where a directory would go is never followed;
 * no cache directory is no error. */
#include "kernel-host/homecache.c"

#include "tests/unit/tap.h"
#include "tests/unit/tmpdir.h"

static char root[] = "/tmp/glovebox-homecache-XXXXXX";

static void put(const char *rel, const char *text)
{
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", root, rel);
        f = fopen(path, "w");
        if (f) {
                fputs(text, f);
                fclose(f);
        }
}

static void in(char *out, size_t size, const char *rel)
{
        snprintf(out, size, "%s/%s", root, rel);
}

int main(void)
{
        char cache[512], home[512], path[512], target[512];
        struct stat st;
        ssize_t n;

        if (!mkdtemp(root)) {
                diag("mkdtemp failed");
                return done_testing();
        }
        in(cache, sizeof(cache), "cache");
        in(home, sizeof(home), "home");
        mkdir(cache, 0755);
        in(path, sizeof(path), "cache/.cache");
        mkdir(path, 0755);
        in(path, sizeof(path), "cache/.cache/matplotlib");
        mkdir(path, 0755);
        put("cache/.cache/matplotlib/fontlist-v330.json", "{}");

        ok(homecache_link(cache, home, getuid()) < 0, "a home that is not there is an error");
        mkdir(home, 0700);
        in(path, sizeof(path), "nothing");
        ok(homecache_link(path, home, getuid()) == 0, "no cache is no error");

        ok(homecache_link(cache, home, getuid()) == 0, "an empty home is linked");
        in(path, sizeof(path), "home/.cache/matplotlib/fontlist-v330.json");
        n = readlink(path, target, sizeof(target) - 1);
        target[n > 0 ? n : 0] = '\0';
        ok(n > 0 && strstr(target, "/cache/.cache/matplotlib/") && lstat(path, &st) == 0 &&
               S_ISLNK(st.st_mode),
           "the file is a link to the cache's: %s", target);
        in(path, sizeof(path), "home/.cache");
        ok(lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid(),
           "its directories are the home's own");

        /* Anything in the home: left as it is. */
        in(path, sizeof(path), "home2");
        mkdir(path, 0700);
        put("home2/notes.txt", "mine");
        ok(homecache_link(cache, path, getuid()) == 0, "a home with files is no error");
        in(path, sizeof(path), "home2/.cache");
        ok(lstat(path, &st) < 0 && errno == ENOENT, "and gets no link");

        /* A link where .cache would go (a home brought back) is not followed,
         * even when it is the home's only entry. */
        in(path, sizeof(path), "home3");
        mkdir(path, 0700);
        in(path, sizeof(path), "elsewhere");
        mkdir(path, 0700);
        in(target, sizeof(target), "home3/.cache");
        if (symlink(path, target) < 0)
                diag("symlink: %s", strerror(errno));
        in(path, sizeof(path), "home3");
        ok(homecache_link(cache, path, getuid()) == 0, "a home holding a link is no error");
        in(path, sizeof(path), "elsewhere/matplotlib");
        ok(lstat(path, &st) < 0 && errno == ENOENT, "nothing is made where the link points");

        tmpdir_remove(root);
        return done_testing();
}
