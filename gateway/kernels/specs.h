/* The kernelspecs the gateway serves, kept current, and what follows from
 * them: the host paths every sandbox needs to run them, and which one
 * serves a language an E2B client names.
 *
 * The list is found on the search path (protocol/kernelspec.h) plus
 * Glovebox's own kernels (kernels/ of the source tree, or of the installed
 * data directory), and found again whenever one of those directories or a
 * kernel.json in them changed: a cheap stat of each on every lookup.
 * Entries never move: a kernelspec that changed on disk is replaced in
 * place, one that was removed is only marked removed, so pointers held by
 * kernels and the pool stay valid. */
#ifndef GLOVEBOX_SPECS_H
#define GLOVEBOX_SPECS_H

#include "protocol/kernelspec.h"

#include <stdbool.h>
#include <stddef.h>

#define SPECS_MAX 128 /* kernelspecs served at once; more are skipped with a warning */

/* Finds the kernelspecs into *list (which the caller frees with
 * jp_kernelspec_list_free, after the last use). extra is
 * --kernelspec-path. 0 or -errno. */
int specs_init(const char *extra, struct jp_kernelspec_list *list);
/* Finds the kernelspecs again if their directories changed. */
void specs_refresh(void);
/* The host paths every sandbox binds read-only: kernelspec directories
 * outside /usr, the paths kernelspecs declare in their metadata
 * ("glovebox": {"read_only_paths": [...]}), and what known languages need
 * (R's /etc/R). NULL-terminated; valid until the next specs_refresh. */
char *const *specs_ro_paths(void);
/* E2B's name of a language, as its code interpreter uses it: lower case,
 * "js" is "javascript", "ts" is "typescript". false if it is no name. */
bool specs_language_name(const char *language, char *out, size_t size);
/* The kernelspec serving language (a normalized name): the default
 * kernelspec when it speaks it; else the one of that name that does; else
 * the first whose "language" is it, case aside. NULL if none. */
const struct jp_kernelspec *specs_for_language(const char *language, const char *default_kernel);
/* Whether ks (not removed) speaks language (a normalized name). */
bool specs_speaks(const struct jp_kernelspec *ks, const char *language);
/* The languages installed, normalized and comma-separated, into out. */
void specs_languages(char *out, size_t size);
/* Whether ks's kernel binds TCP only, whatever its connection file says
 * (ijavascript, tslab: known by their programs), or its metadata says so
 * ("glovebox": {"transport": "tcp"}): then it runs under
 * glovebox-kernel-bridge, which specs_ro_paths binds into sandboxes. */
bool specs_tcp_only(const struct jp_kernelspec *ks);
/* How ks's kernel names its ipc sockets: '-' as jupyter_client does
 * (<ip>-<port>), or ':' (<ip>:<port>, as kernels that build
 * "transport://ip:port" do) when its metadata says
 * "glovebox": {"ipc_naming": "ip:port"}. */
char specs_ipc_separator(const struct jp_kernelspec *ks);
/* Frees what the module holds (not the list). */
void specs_free(void);

#endif
