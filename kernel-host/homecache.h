/* Caches every fresh home would otherwise build for itself, built once per
 * host and shared read-only (docs/performance.md#fast-by-default).
 *
 * matplotlib lists the machine's fonts into ~/.cache/matplotlib/fontlist-
 * vNNN.json the first time it is imported in a home: about 0.6 s of every
 * new kernel's first plot. As root, the kernel-host builds that file once
 * in HOMECACHE_DIR (again when the fonts change), laid out as a home is.
 * Sandboxes on the host's root see that directory read-only at
 * HOMECACHE_MOUNT, and a sandbox's empty home gets a symbolic link to each
 * of its files, where matplotlib looks. The link is the sandbox's own to
 * remove; its target cannot be written. */
#ifndef GLOVEBOX_HOMECACHE_H
#define GLOVEBOX_HOMECACHE_H

#include <stdbool.h>

#define HOMECACHE_DIR   "/var/cache/glovebox/home"
#define HOMECACHE_MOUNT "/opt/glovebox/home"

/* Builds HOMECACHE_DIR when it is missing or older than the fonts, as
 * root; logs and goes on without it when it cannot. */
void homecache_prepare(void);
/* The directory to bind at HOMECACHE_MOUNT, or NULL when there is none. */
const char *homecache_dir(void);
/* Links each file below the directory cache into the home at home_path,
 * where that home is empty, owned by uid: in a new sandbox as its root
 * after pivot_root (cache: HOMECACHE_MOUNT), in a zygote's private home
 * (HOMECACHE_DIR). Never follows a link of the home. 0 (also when there
 * is no cache), or -errno. */
int homecache_link(const char *cache, const char *home_path, int uid);

#endif
