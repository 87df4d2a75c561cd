#include "autoconf.h"

#include "gateway/kernels/limits.h"
#include "protocol/hostmsg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Each limit by its request name, with the controller it needs (0: none). */
static const struct {
        const char *name;
        enum hostmsg_controller controller;
} limits[] = {
    {"memory_mb", HOSTMSG_CONTROLLER_MEMORY},
    {"cpus", HOSTMSG_CONTROLLER_CPU},
    {"pids", HOSTMSG_CONTROLLER_PIDS},
    {"disk_mb", 0},
};

#define NLIMITS (sizeof(limits) / sizeof(limits[0]))

int limits_refusal(json_t *requested, unsigned controllers, char *err, size_t errlen)
{
        for (size_t i = 0; i < NLIMITS; i++) {
                enum hostmsg_controller needs = limits[i].controller;

                if (!json_object_get(requested, limits[i].name) || !needs || (controllers & needs))
                        continue;
                snprintf(err, errlen,
                         "%s limit needs the cgroup %s controller, which this host does not "
                         "delegate to Glovebox",
                         limits[i].name, hostmsg_controller_name(needs));
                return -EPERM;
        }
        return 0;
}

json_t *limits_not_enforced(unsigned controllers, bool sandboxed)
{
        json_t *list = json_array();

        for (size_t i = 0; list && i < NLIMITS; i++) {
                enum hostmsg_controller needs = limits[i].controller;

                if (!sandboxed || (needs && !(controllers & needs)))
                        json_array_append_new(list, json_string(limits[i].name));
        }
        return list;
}

json_t *limits_record(const struct hostmsg_limits *l)
{
        return json_pack("{s:I, s:I, s:I, s:I}", "memory_mb", (json_int_t)l->memory_mb,
                         "cpu_millis", (json_int_t)l->cpu_millis, "pids", (json_int_t)l->pids,
                         "disk_mb", (json_int_t)l->disk_mb);
}

void limits_from_record(json_t *record, struct hostmsg_limits *out)
{
        out->memory_mb = (uint64_t)json_integer_value(json_object_get(record, "memory_mb"));
        out->cpu_millis = (uint32_t)json_integer_value(json_object_get(record, "cpu_millis"));
        out->pids = (uint32_t)json_integer_value(json_object_get(record, "pids"));
        out->disk_mb = (uint64_t)json_integer_value(json_object_get(record, "disk_mb"));
}
