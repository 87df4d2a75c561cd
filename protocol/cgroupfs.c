#include "autoconf.h"

#include "protocol/cgroupfs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

bool cgroupfs_list_has(const char *list, const char *word, char sep)
{
        size_t wlen = strlen(word);

        for (const char *p = list; p && *p;) {
                const char *end = strchr(p, sep);
                size_t n = end ? (size_t)(end - p) : strcspn(p, "\n");

                if (n == wlen && strncmp(p, word, n) == 0)
                        return true;
                p = end ? end + 1 : NULL;
        }
        return false;
}

int cgroupfs_find_mount(const char *controller, char *point, size_t psize, char *root, size_t rsize)
{
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char line[4096];
        int rc = -ENOENT;

        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                char mroot[PATH_MAX], mpoint[PATH_MAX], fstype[64], super[1024];
                char *dash = strstr(line, " - ");

                if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2 ||
                    sscanf(dash + 3, "%63s %*s %1023s", fstype, super) != 2)
                        continue;
                if (controller ? strcmp(fstype, "cgroup") != 0 ||
                                     !cgroupfs_list_has(super, controller, ',')
                               : strcmp(fstype, "cgroup2") != 0)
                        continue;
                snprintf(point, psize, "%s", mpoint);
                snprintf(root, rsize, "%s", mroot);
                rc = 0;
                break;
        }
        fclose(f);
        return rc;
}
