/* Scratch directories for tests that need real files. */
#ifndef GLOVEBOX_TEST_TMPDIR_H
#define GLOVEBOX_TEST_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline int tmpdir_remove_one(const char *path, const struct stat *st, int flag,
                                    struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

/* Removes dir and everything below it, without following symlinks. */
static inline int tmpdir_remove(const char *dir)
{
        return nftw(dir, tmpdir_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
