/* A stock shared by tenants (share.h). */
#include "autoconf.h"

#include "protocol/share.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool jp_share_name_valid(const char *name)
{
        size_t len = strlen(name);

        return len > 0 && len < JP_SHARE_NAME_SIZE &&
               strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
                   len;
}

unsigned jp_share_most(unsigned size)
{
        return size > 1 ? (size + 1) / 2 : 1;
}

static struct jp_share_taker *find(const struct jp_share *s, const char *who)
{
        for (size_t i = 0; i < s->n; i++) {
                if (strcmp(s->takers[i].name, who) == 0)
                        return &s->takers[i];
        }
        return NULL;
}

bool jp_share_may_take(const struct jp_share *s, const char *who, unsigned size)
{
        const struct jp_share_taker *t;

        if (!who || !who[0])
                return true;
        t = find(s, who);
        return !t || t->taken < jp_share_most(size);
}

int jp_share_took(struct jp_share *s, const char *who)
{
        struct jp_share_taker *t;

        if (!who || !who[0])
                return 0;
        t = find(s, who);
        if (!t) {
                if (s->n == s->cap) {
                        size_t cap = s->cap ? s->cap * 2 : 4;
                        struct jp_share_taker *more = realloc(s->takers, cap * sizeof(*more));

                        if (!more)
                                return -ENOMEM;
                        s->takers = more;
                        s->cap = cap;
                }
                t = &s->takers[s->n++];
                snprintf(t->name, sizeof(t->name), "%s", who);
                t->taken = 0;
        }
        t->taken++;
        return 0;
}

void jp_share_reset(struct jp_share *s)
{
        s->n = 0;
}

void jp_share_free(struct jp_share *s)
{
        free(s->takers);
        *s = (struct jp_share){0};
}
