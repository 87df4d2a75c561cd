/* Pausing a sandbox to disk and bringing it back (E2B's pause with
 * keepMemory false): what it holds in /home/user is saved as a tar
 * archive that tar, run inside the sandbox as its user, writes to its
 * stdout; the gateway stores that stream in a file of its own state
 * directory, never touching a sandbox-writable path as root. Resuming
 * feeds the archive to tar's stdin in the new sandbox.
 *
 * On disk, under --state-dir: paused/<id>/meta.json (what the owner
 * records: template, env, limits, timeout, tenant) and
 * paused/<id>/home.tar. The kernel's memory is not kept: see
 * PAUSE_MEMORY_NOTICE. */
#ifndef GLOVEBOX_PAUSE_H
#define GLOVEBOX_PAUSE_H

#include "gateway/kernels/sandboxes.h"

#include <jansson.h>
#include <stdint.h>

#define PAUSE_ID_MAX 64
/* Said wherever a pause of the files only shows (model, info, log), with
 * why the memory was not kept after it. */
#define PAUSE_MEMORY_NOTICE                                                                        \
        "variables are not kept: only the files in /home/user were saved (see docs/pause.md)"

/* done(ctx, 0, NULL, bytes) once the archive is stored or restored, or
 * done(ctx, -errno, message, 0). Called once, from the loop. */
typedef void (*pause_done_fn)(void *ctx, int status, const char *message, uint64_t bytes);

/* Takes the state directory for this gateway (making it if missing):
 * -EBUSY, logged with the other's pid, when another gateway has it. Before
 * anything else touches it. "" or NULL: nothing to take. */
int state_dir_lock(const char *state_dir);
/* Sets the state directory (config's --state-dir) and makes its paused/
 * directory; 0 or -errno. "" disables pausing. */
int pause_init(const char *state_dir);
bool pause_enabled(void);
/* Writes text as name in the directory dir (a descriptor) so that a
 * reader finds all of it or the old file: written whole as name.new (a
 * name.new already there, a symlink or a crash's file, is removed first;
 * O_EXCL | O_NOFOLLOW never write through one), 0600, made durable, then
 * renamed over name, and the directory made durable. 0 or -errno; on
 * failure name.new is gone. */
int state_write_file(int dir, const char *name, const char *text);
/* Writes meta (borrowed) as paused/<id>/meta.json, made anew. */
int pause_write_meta(const char *id, json_t *meta);
/* Reads every paused/<id>/meta.json: calls found(ctx, id, meta) for each
 * (meta borrowed for the call). Returns how many were found. */
int pause_load_all(void (*found)(void *ctx, const char *id, json_t *meta), void *ctx);
/* Room for what tar adds beyond the files (headers, padding, the end). */
#define PAUSE_ARCHIVE_SLACK (16ull << 20)
/* Less room than this left for an owner's paused sandboxes is none. */
#define PAUSE_MIN_ROOM (1ull << 20)
/* What owner's paused sandboxes and kernels and snapshots hold on disk
 * (their archives, and their checkpoints as recorded in "checkpointBytes"),
 * but for skip's. */
uint64_t pause_owner_bytes(const char *owner, const char *skip);
/* What sb's archive may take: its disk limit (and tar's own headers),
 * within what owner's other paused sandboxes leave of --pause-quota-mb.
 * 0, or -EDQUOT when they leave less than PAUSE_MIN_ROOM. */
int pause_archive_room(const struct sandbox *sb, const char *owner, const char *id,
                       uint64_t *room);
/* Saves sb's /home/user as paused/<id>/home.tar, sparse files as sparse,
 * at most pause_archive_room's bytes: past them tar is stopped and done
 * hears -EFBIG with why (nothing is kept). -EDQUOT at once when owner has
 * no room left. done follows. */
int pause_save_home(struct sandbox *sb, const char *id, const char *owner, pause_done_fn done,
                    void *ctx);
/* Restores paused/<id>/home.tar into sb's /home/user; done follows. */
int pause_restore_home(struct sandbox *sb, const char *id, pause_done_fn done, void *ctx);
/* Removes paused/<id>/ and what it holds. */
void pause_forget(const char *id);

/* The same in either store: paused/ (what the calls above use) or
 * snapshots/ (E2B's snapshots: a sandbox's files kept under an id of
 * their own, which new sandboxes start from; they count against their
 * owner's --pause-quota-mb with the paused ones). */
enum pause_store { PAUSE_PAUSED, PAUSE_SNAPSHOTS };
int pause_write_meta_in(enum pause_store store, const char *id, json_t *meta);
int pause_load_all_in(enum pause_store store,
                      void (*found)(void *ctx, const char *id, json_t *meta), void *ctx);
void pause_forget_in(enum pause_store store, const char *id);
int pause_save_home_in(enum pause_store store, struct sandbox *sb, const char *id,
                       const char *owner, pause_done_fn done, void *ctx);
int pause_restore_home_from(enum pause_store store, struct sandbox *sb, const char *id,
                            pause_done_fn done, void *ctx);

#endif
