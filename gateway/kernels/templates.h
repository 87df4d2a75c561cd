/* Templates: environments an operator names (--template NAME=DIR, or
 * "template" in the --config file) for sandboxes to be made of.
 *
 * - NAME=DIR: DIR is a root filesystem tree (made with debootstrap, or
 *   unpacked from an OCI image's layers). A sandbox of NAME sees the tree
 *   as its root, read-only and shared, under a writable upper layer of its
 *   own (overlayfs) on its size-limited tmpfs: what it writes anywhere the
 *   image lets its user write stays in that sandbox and goes with it. The
 *   tree's kernelspecs (DIR/usr/local/share/jupyter/kernels,
 *   DIR/usr/share/jupyter/kernels) are its kernels.
 * - NAME=host:DIR[:DIR...]: the host's /usr, as every sandbox has it, plus
 *   those directories, bound read-only at the same paths. Its kernels are
 *   the host's.
 *
 * Each template's kernels are listed as kernelspecs too: NAME for its
 * default kernel (the --default-kernel name if it has one, else the first
 * by name), NAME-KERNEL for the others; a kernelspec whose kernel.json
 * says "metadata": {"glovebox": {"template": NAME}} runs in NAME as well.
 * So {"template": NAME}, {"name": NAME}, E2B's Sandbox.create(NAME) and
 * such kernelspecs all select it, and a kernelspec carries its template
 * wherever it is started. */
#ifndef GLOVEBOX_TEMPLATES_H
#define GLOVEBOX_TEMPLATES_H

#include "gateway/core/config.h"
#include "gateway/kernels/sandboxes.h"
#include "protocol/hostmsg.h"
#include "protocol/kernelspec.h"

#include <stdbool.h>
#include <stddef.h>

struct sandbox_template;

/* Reads the templates of cfg, adds their kernelspecs to specs (whose
 * items move: call before anything keeps a pointer to one) and checks the
 * kernelspecs that name a template. 0, or -EINVAL after logging why. */
int templates_init(const struct config *cfg, struct jp_kernelspec_list *specs);
void templates_free(void);
/* The template called name, or NULL. */
const struct sandbox_template *templates_find(const char *name);
/* The kernelspec of t called kernel (NULL: its default), or NULL. */
const struct jp_kernelspec *templates_kernel(const struct sandbox_template *t, const char *kernel);
/* "a, b, c": every template's name, for messages; "" without any. */
const char *templates_names(void);
/* Asks for a new sandbox for kernels of spec: its template's root and
 * read-only directories, or the host's, with network's egress (NULL or
 * not enabled: none). As sandbox_new. */
int templates_sandbox_new(const struct jp_kernelspec *spec, const struct hostmsg_limits *limits,
                          bool confined, const struct hostmsg_network *network,
                          struct sandbox **out);
/* The same, with a built template's layers over the template (or a
 * build's new layer: gateway/e2b/builds.h); NULL: none. */
int templates_sandbox_new_layered(const struct jp_kernelspec *spec,
                                  const struct hostmsg_limits *limits, bool confined,
                                  const struct hostmsg_network *network,
                                  const struct sandbox_layers *layers, struct sandbox **out);
/* Whether kernels of a and b may share a sandbox: the same template. */
bool templates_same(const struct jp_kernelspec *a, const struct jp_kernelspec *b);

#endif
