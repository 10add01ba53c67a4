/* sl_cancel.h - the process-wide cancel request of shardload.h (sl_cancel, sl_cancel_clear), as
 * the long-running loops test it: the read pipeline between requests, the writer before each
 * write. A loop that sees it fails with SL_E_CANCELLED, and the usual cleanup of a failure removes
 * what it had not finished. */
#ifndef SL_CANCEL_H
#define SL_CANCEL_H

/* 1 once sl_cancel was called (until sl_cancel_clear). */
int sl_cancel_requested(void);

#endif /* SL_CANCEL_H */
