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
