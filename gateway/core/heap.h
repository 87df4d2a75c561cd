/* How the gateway's allocator holds large buffers (ZMQ's receive buffers
 * for kernel messages, the relay's copies, libwebsockets' copy of what a
 * socket did not take at once).
 *
 * At rest, buffers of 1 MiB and more are mapped on their own and unmapped
 * when freed, so that a burst of output leaves nothing resident. While
 * large messages flow, fresh pages for every one of them cost more than
 * the relay itself (faulting in and zeroing 25 MB, then unmapping it, per
 * message): then freed buffers are kept in the heap and reused, and once
 * no large message has come for HEAP_IDLE_MS they are given back. */
#ifndef GLOVEBOX_HEAP_H
#define GLOVEBOX_HEAP_H

#include <stddef.h>

#define HEAP_LARGE   (1024 * 1024)       /* a buffer this large is mapped on its own at rest */
#define HEAP_KEEP    (128 * 1024 * 1024) /* while busy, buffers up to this size are reused */
#define HEAP_IDLE_MS 5000.0              /* no large message for this long: memory given back */

/* Sets the resting policy; call once at start, before any thread (ZMQ's
 * I/O thread) exists. An operator's own GLIBC_TUNABLES mmap or trim
 * threshold is left alone, and so is the allocator then: no busy mode. */
void heap_init(void);
/* A message of bytes arrived (any size; the small are ignored). A large
 * one starts, or prolongs, the busy period. */
void heap_message_seen(size_t bytes);

#endif
