#include "autoconf.h"

#include "gateway/kernels/warm.h"
#include "gateway/kernels/host.h"
#include "protocol/log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A list of one entry, NAME followed by tail, as config_load makes them. */
static char **one_entry(const char *name, const char *tail)
{
        char **list = calloc(2, sizeof(char *));

        if (!list || asprintf(&list[0], "%s%s", name, tail) < 0) {
                free(list);
                return NULL;
        }
        return list;
}

/* Why the default kernelspec's kernels cannot come from a zygote, or NULL
 * when they can: the kernel-host's test (zygote_fits), as far as the
 * kernelspec alone says. */
static const char *why_no_zygote(const struct config *cfg, const struct jp_kernelspec *spec)
{
        json_t *argv = json_object_get(spec->spec, "argv");
        const char *program = json_string_value(json_array_get(argv, 0));
        const char *flag = json_string_value(json_array_get(argv, 1));
        char real[PATH_MAX], want[PATH_MAX];

        if (strcmp(cfg->sandbox, "full") != 0)
                return "--sandbox none";
        if (geteuid() != 0)
                return "not root: a zygote's kernels are confined as root does it";
        if (!host_has_file("glovebox-zygote.so", R_OK))
                return "glovebox-zygote.so was not built (it needs python3-config --embed)";
        if (!program || !flag || strcmp(flag, "-m") != 0 || !realpath(program, real) ||
            !realpath(GLOVEBOX_ZYGOTE_PYTHON, want) || strcmp(real, want) != 0)
                return "its kernelspec's argv is not " GLOVEBOX_ZYGOTE_PYTHON " -m MODULE";
        if (spec->template_name[0])
                return "its kernelspec runs in a template";
        return NULL;
}

int warm_defaults(struct config *cfg, const struct jp_kernelspec_list *specs)
{
        const struct jp_kernelspec *spec = jp_kernelspec_find(specs, cfg->default_kernel);
        char pool[32];

        if (!spec || (cfg->zygote && cfg->pool))
                return 0;
        if (!cfg->zygote) {
                const char *why = why_no_zygote(cfg, spec);

                if (why) {
                        log_info("%s kernels start cold, without a zygote: %s "
                                 "(docs/performance.md#fast-by-default)",
                                 spec->name, why);
                } else {
                        cfg->zygote = one_entry(spec->name, ":" WARM_MODULES);
                        if (!cfg->zygote)
                                return -ENOMEM;
                        log_info("%s kernels fork from a zygote that imported %s where installed "
                                 "(--zygote none turns it off)",
                                 spec->name, WARM_MODULES);
                }
        }
        if (!cfg->pool && strcmp(cfg->sandbox, "full") == 0 && cfg->max_kernels > 0) {
                snprintf(pool, sizeof(pool), "=%lld",
                         (long long)(cfg->max_kernels < WARM_POOL ? cfg->max_kernels : WARM_POOL));
                cfg->pool = one_entry(spec->name, pool);
                if (!cfg->pool)
                        return -ENOMEM;
        }
        return 0;
}
