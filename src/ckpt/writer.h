/* writer.h - what the tools need of the safetensors writer (writer.c) beyond shardload.h.
 *
 * A writer's temporary file (<path>.tmp.XXXXXX, renamed to <path> by sl_writer_finish) is locked
 * with flock while the writer holds it open, so that a later run can tell the temporary files of
 * a run that died (a kill -9, a crash, a power cut: no lock) from those of a live writer. */
#ifndef SL_CKPT_WRITER_H
#define SL_CKPT_WRITER_H

#include "shardload.h"

#include "common/sl_err.h"

/* Removes from dir the temporary files that writers of the final names `ours` accepts left behind
 * and that no live writer holds (not locked). */
sl_status ck_writer_remove_stale(const char *dir, int (*ours)(void *user, const char *final_name),
                                 void *user, sl_err *err);

/* A set of writers of which only a few hold a descriptor at once: a reshard into thousands of
 * parts writes them in checkpoint order, a little to each, and would otherwise keep every part
 * open (issue 18 item 11). A writer joins after sl_writer_begin; the least recently used idle
 * writer is parked (descriptor closed, its temporary file kept) to let another write, and opened
 * again by name when written next. Thread-safe across writers; each writer is still written by one
 * thread at a time (the caller's lock). A parked writer holds no lock on its temporary file, so
 * only a second run writing the same names at the same time could take it for stale (such a run
 * would spoil the output anyway); runs one after another, and MPI ranks (each removes only its own
 * devices' names), never do. */
typedef struct ck_writer_set ck_writer_set;

sl_status ck_writer_set_new(ck_writer_set **out, sl_err *err);
void ck_writer_set_free(ck_writer_set *s);
sl_status ck_writer_set_join(ck_writer_set *s, sl_writer *w, sl_err *err);
/* sl_writer_write through the set. */
sl_status ck_writer_set_write(ck_writer_set *s, sl_writer *w, int64_t idx, uint64_t offset,
                              const void *data, size_t n);
/* sl_writer_finish, w leaving the set. */
sl_status ck_writer_set_finish(ck_writer_set *s, sl_writer *w);

#endif /* SL_CKPT_WRITER_H */
