/* A stock shared by tenants (the gateway's warm pool of kernels, the
 * kernel-host's sandboxes made ahead): who took how many from it since it
 * was last full. While it refills, one tenant takes at most half of it,
 * rounded up, so that one tenant cannot empty it for the others; a take
 * for nobody in particular ("" or NULL: one tenant only, the gateway's
 * own work) is never held back. */
#ifndef GLOVEBOX_SHARE_H
#define GLOVEBOX_SHARE_H

#include <stdbool.h>
#include <stddef.h>

#define JP_SHARE_NAME_SIZE 64 /* a tenant's name: 1 to 63 characters and a NUL */

/* Whether name may name a tenant (a key's name in a keys file, the tenant
 * a sandbox request names): 1 to 63 of [A-Za-z0-9_.-]. */
bool jp_share_name_valid(const char *name);

struct jp_share_taker {
        char name[JP_SHARE_NAME_SIZE];
        unsigned taken;
};

struct jp_share {
        struct jp_share_taker *takers;
        size_t n, cap;
};

/* The most one tenant takes of a stock of size while it refills. */
unsigned jp_share_most(unsigned size);
/* Whether who may take one more of a stock of size. */
bool jp_share_may_take(const struct jp_share *s, const char *who, unsigned size);
/* Counts a take by who (nothing for nobody in particular). -ENOMEM when
 * it cannot be counted: the take stands, uncounted. */
int jp_share_took(struct jp_share *s, const char *who);
/* The stock is full again: every count starts over. */
void jp_share_reset(struct jp_share *s);
void jp_share_free(struct jp_share *s);

#endif
