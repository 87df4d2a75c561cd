/* What a kernel prints (its stdout and stderr, one pipe from the
 * kernel-host): read as it comes, so the kernel never blocks on it, and the
 * last lines kept, so that a kernel that fails to start can say why in the
 * error its client sees rather than only "exited with code 1". */
#ifndef GLOVEBOX_KERNEL_OUTPUT_H
#define GLOVEBOX_KERNEL_OUTPUT_H

#include <stddef.h>

#define KERNEL_OUTPUT_TAIL 1024 /* bytes of the newest output kept */

struct kernel_output;

/* Watches fd (taken: closed by kernel_output_destroy) from the loop;
 * kernel_id names the kernel in debug logs (copied). 0 or -errno (fd is
 * closed then too). */
int kernel_output_new(int fd, const char *kernel_id, struct kernel_output **out);
/* Reads whatever is waiting now (the kernel may have just exited). */
void kernel_output_drain(struct kernel_output *o);
/* The last whole lines kept, printable ASCII (other bytes as '?', newlines as
 * " | "), at most size - 1 bytes; "" when there are none. o may be NULL. */
void kernel_output_tail(const struct kernel_output *o, char *out, size_t size);
void kernel_output_destroy(struct kernel_output **o);

#endif
