#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/limits.h"
#include "protocol/hostmsg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* variables of a kernel: its kernelspec's and a request's (or an E2B
 * sandbox's envVars), as many as a process may have */
#define MAX_KERNEL_ENV HOSTMSG_MAX_ENV

/* ---- models --------------------------------------------------------------- */

json_t *kernel_model(const struct kernel *k)
{
        char last_activity[JP_TIMESTAMP_SIZE];
        json_t *model, *not_enforced;

        jp_timestamp_format(&k->last_activity, last_activity);
        model = json_pack("{s:s, s:s, s:s, s:s, s:i}", "id", k->id, "name", k->spec->name,
                          "last_activity", last_activity, "execution_state", k->execution_state,
                          "connections", k->connections);

        /* Why the kernel last died, until a restart is asked for: after an
         * automatic restart it explains the lost state. */
        if (model && k->last_death[0])
                json_object_set_new(model, "reason", json_string(k->last_death));
        /* Egress, when its sandbox has any (gateway/kernels/egress.h). */
        if (model && k->sandbox && k->sandbox->network.enabled)
                json_object_set_new(model, "network", egress_describe(&k->sandbox->network));
        /* Limits this host cannot enforce, if any (README, limits). */
        not_enforced =
            limits_not_enforced(host_controllers(), strcmp(config_get()->sandbox, "none") != 0);
        if (model && json_array_size(not_enforced))
                json_object_set(model, "limits_not_enforced", not_enforced);
        json_decref(not_enforced);
        return model;
}

json_t *kernels_model(void)
{
        json_t *list = json_array();

        for (struct kernel *k = kernels_head; list && k; k = k->next) {
                if (k->phase != KERNEL_STOPPING && !k->pooled && tenants_may_reach(k->owner))
                        json_array_append_new(list, kernel_model(k));
        }
        return list;
}

/* ---- environment -------------------------------------------------------- */

static bool env_name_valid(const char *name)
{
        if (!((name[0] >= 'A' && name[0] <= 'Z') || (name[0] >= 'a' && name[0] <= 'z') ||
              name[0] == '_'))
                return false;
        for (const char *p = name; *p; p++) {
                if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                      (*p >= '0' && *p <= '9') || *p == '_'))
                        return false;
        }
        /* A kernel in a pid namespace must not watch for a parent pid: its
         * parent there is the sandbox's init (DESIGN §4). */
        return strcmp(name, "JPY_PARENT_PID") != 0 && strlen(name) <= 128;
}

/* Appends "NAME=value" for each member of obj to env. */
int kernel_env_append(json_t *obj, char ***env, size_t *n, char *err, size_t errlen)
{
        const char *name;
        json_t *value;

        json_object_foreach(obj, name, value) {
                const char *v = json_string_value(value);
                size_t len;
                char *entry, **grown;

                if (!env_name_valid(name)) {
                        snprintf(err, errlen, "invalid environment variable name \"%.64s\"", name);
                        return -EINVAL;
                }
                if (!v || strlen(v) != json_string_length(value)) {
                        snprintf(err, errlen,
                                 "environment variable %s must be a string without NUL", name);
                        return -EINVAL;
                }
                if (strlen(name) + 1 + json_string_length(value) > HOSTMSG_MAX_STRING) {
                        snprintf(err, errlen,
                                 "environment variable %s is %zu bytes as NAME=value; one may be "
                                 "at most %d bytes, Linux's limit (MAX_ARG_STRLEN)",
                                 name, strlen(name) + 1 + json_string_length(value),
                                 HOSTMSG_MAX_STRING);
                        return -EINVAL;
                }
                if (*n >= MAX_KERNEL_ENV) {
                        snprintf(err, errlen, "too many environment variables: at most %d",
                                 MAX_KERNEL_ENV);
                        return -EINVAL;
                }
                len = strlen(name) + strlen(v) + 2;
                entry = malloc(len);
                grown = realloc(*env, (*n + 2) * sizeof(char *));
                if (!entry || !grown) {
                        free(entry);
                        if (grown)
                                *env = grown;
                        return -ENOMEM;
                }
                *env = grown;
                snprintf(entry, len, "%s=%s", name, v);
                (*env)[(*n)++] = entry;
                (*env)[*n] = NULL;
        }
        return 0;
}

/* Reads {"memory_mb", "cpus", "pids", "disk_mb"} within the server maxima. */
