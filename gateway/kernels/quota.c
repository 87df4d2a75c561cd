#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/core/tenants.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- what each tenant holds, and its quotas -------------------------------- */

/* Whether k counts in owner's quota: handed out and not deleted. A dead
 * one counts too: it is listed, and a restart asked for brings it back. */
static bool held_by(const struct kernel *k, const char *owner)
{
        return k->phase != KERNEL_STOPPING && !k->pooled && strcmp(k->owner, owner) == 0;
}

#define USAGE_MAX_HOLDERS 4

static kernels_usage_fn holders[USAGE_MAX_HOLDERS];
static size_t nholders;

int kernels_usage_register(kernels_usage_fn fn)
{
        if (nholders == USAGE_MAX_HOLDERS)
                return -ENOSPC;
        holders[nholders++] = fn;
        return 0;
}

void kernels_usage(const char *owner, struct tenant_usage *out)
{
        memset(out, 0, sizeof(*out));
        for (struct kernel *k = kernels_head; k; k = k->next) {
                bool counted = false;

                if (!held_by(k, owner))
                        continue;
                out->kernels++;
                /* A shared sandbox's limits are the sandbox's: counted
                 * with the first of its kernels in the list only. */
                for (struct kernel *o = kernels_head; k->sandbox && o != k; o = o->next)
                        counted |= o->sandbox == k->sandbox && held_by(o, owner);
                if (!counted) {
                        out->memory_mb += k->limits.memory_mb;
                        out->cpu_millicores += k->limits.cpu_millis;
                }
        }
        /* What the families hold beside kernels (a terminal's own sandbox
         * holds memory and CPU as a kernel's does). */
        for (size_t i = 0; i < nholders; i++)
                holders[i](owner, &out->memory_mb, &out->cpu_millicores);
}

static json_t *quota_value(int64_t v)
{
        return v == KEYS_NO_QUOTA ? json_null() : json_integer(v);
}

static int quota_check(const struct hostmsg_limits *limits, const struct sandbox *shared,
                       unsigned kernels, json_t **why);

int kernels_quota_check(const struct hostmsg_limits *limits, const struct sandbox *shared,
                        json_t **why)
{
        return quota_check(limits, shared, 1, why);
}

int kernels_quota_check_many(const struct hostmsg_limits *limits, unsigned n, json_t **why)
{
        return quota_check(limits, NULL, n, why);
}

int kernels_quota_check_sandbox(const struct hostmsg_limits *limits, json_t **why)
{
        return quota_check(limits, NULL, 0, why);
}

/* Whether kernels more kernels (or, for 0, one sandbox) of limits each fit. */
static int quota_check(const struct hostmsg_limits *limits, const struct sandbox *shared,
                       unsigned kernels, json_t **why)
{
        const struct tenant_caller *c = tenants_caller();
        const struct key_entry *key = c ? tenants_key(c->name) : NULL;
        struct tenant_usage u;
        int64_t memory, cpu;
        const char *over = NULL;

        *why = NULL;
        if (!key)
                return 0; /* the gateway's own start (the pool) */
        kernels_usage(key->name, &u);
        memory = (int64_t)limits->memory_mb * (kernels ? kernels : 1);
        cpu = (int64_t)limits->cpu_millis * (kernels ? kernels : 1);
        for (struct kernel *k = kernels_head; shared && k; k = k->next) {
                if (k->sandbox == shared && held_by(k, key->name)) {
                        memory = cpu = 0; /* already counted */
                        break;
                }
        }
        if (kernels && key->max_kernels != KEYS_NO_QUOTA &&
            u.kernels + kernels > key->max_kernels)
                over = "kernels";
        else if (key->max_memory_mb != KEYS_NO_QUOTA && u.memory_mb + memory > key->max_memory_mb)
                over = "memory";
        else if (key->max_cpu_millicores != KEYS_NO_QUOTA &&
                 u.cpu_millicores + cpu > key->max_cpu_millicores)
                over = "CPU";
        if (!over)
                return 0;
        *why = json_pack("{s:s++, s:s, s:s, s:{s:o, s:o, s:o}, s:{s:I, s:I, s:I}, s:{s:I, s:I}}",
                         "message", "Quota of key \"", key->name, "\" reached", "reason", "quota",
                         "exceeded", over, "quota", "kernels", quota_value(key->max_kernels),
                         "memory_mb", quota_value(key->max_memory_mb), "cpu_millicores",
                         quota_value(key->max_cpu_millicores), "holding", "kernels",
                         (json_int_t)u.kernels, "memory_mb", (json_int_t)u.memory_mb,
                         "cpu_millicores", (json_int_t)u.cpu_millicores, "asked", "memory_mb",
                         (json_int_t)memory, "cpu_millicores", (json_int_t)cpu);
        return -EDQUOT;
}

json_t *kernels_owners(void)
{
        json_t *owners = json_object();

        for (struct kernel *k = kernels_head; owners && k; k = k->next) {
                const char *name = k->owner[0] ? k->owner : "(pool)";

                if (k->phase == KERNEL_STOPPING || k->pooled || !tenants_may_reach(k->owner))
                        continue;
                json_object_set_new(
                    owners, name,
                    json_integer(json_integer_value(json_object_get(owners, name)) + 1));
        }
        return owners;
}

size_t kernels_count(void)
{
        size_t n = 0;

        for (struct kernel *k = kernels_head; k; k = k->next)
                n++;
        return n;
}
