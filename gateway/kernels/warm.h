/* Fast by default (docs/performance.md#fast-by-default): what --zygote and
 * --pool are when neither is given. */
#ifndef GLOVEBOX_WARM_H
#define GLOVEBOX_WARM_H

#include "gateway/core/config.h"
#include "protocol/kernelspec.h"

/* Kernels of the default kernelspec kept ready in the pool by default. */
#define WARM_POOL 2
/* What the default zygote imports, each only where it is installed: the
 * data-science stack E2B's default template has. */
#define WARM_MODULES "numpy?,pandas?,matplotlib.pyplot?"

/* With --zygote not given: as root, with the sandbox on, a zygote for the
 * default kernelspec when its kernels can come from one; otherwise says
 * once why kernels start cold. With --pool not given: WARM_POOL kernels of
 * the default kernelspec, sandboxed. Call after the kernelspecs are found
 * and before the kernel-host and the pool start. 0, or -ENOMEM. */
int warm_defaults(struct config *cfg, const struct jp_kernelspec_list *specs);

#endif
