/*
 * Inside the training room's gradients (grads.c moves them, accumulate.c
 * adds them): the push slots, the staging buffers, each layer's
 * accumulator state, and the handle they share.
 */
#ifndef WSP_TRAIN_GRADS_INT_H
#define WSP_TRAIN_GRADS_INT_H

#include <pthread.h>
#include <stdint.h>

#include "train/grads.h"
#include "train/ring.h"

/* Pushes in flight at most (events only: a push whose tensors all land
 * needs no staging buffer, so a layer pushed tensor by tensor as each
 * gradient is ready does not hold the host back), and staging buffers:
 * two copies in flight while the worker adds a third. */
#define WB_PUSHES 32u
/* First pushes the worker applies together, at most (wb_apply_pushes). */
#define WB_BATCH 16u
#define WB_BUFS 3u
#define WB_ALIGN 64u
/* Threads adding one push, at most; and elements per thread at least. */
#define WB_ADD_THREADS 32u
#define WB_ADD_MIN_ELEMENTS (1u << 20)
/* Threads clearing an accumulator ahead, at most: it runs beside a forward
 * pass whose weights come over the link from host memory, and all cores
 * zeroing would take the memory's bandwidth from those copies. */
#define WB_CLEAR_THREADS 4u
/* How a push of a tensor lands (wb_push_s.landed): a first push since
 * zeroing whole, in the layer's landing buffer, widened later; or any push
 * through the landing ring (ring.h), widened or added as it lands, when
 * the worker applies the push.  Tensors smaller than WB_RING_MIN_BYTES
 * land whole (a chunk's copy and event are not worth it), and their later
 * pushes are added from a staging buffer. */
enum { LAND_BUFFER = 1, LAND_RING = 2 };
#define WB_RING_MIN_BYTES (64u << 10)
/* A push of rows lands in up to WB_ROW_PIECES pieces of at least
 * wspi_row_piece_bytes (grads.h) bytes of values, each added as soon as it
 * has landed: an embedding's rows come after the backward's last kernel,
 * where the copy and the adding would otherwise follow one another. */
#define WB_ROW_PIECES 8u
/* wb_push_s.rows_tensor of a dense push. */
#define NO_ROWS UINT32_MAX
/* wb.widening when the worker widens nothing ahead. */
#define NO_LAYER UINT32_MAX
/* Accumulators of at least this many bytes are whole pages (wb_acc_alloc),
 * so that they can be pinned in place for fp32 gradients copied straight
 * into them; smaller ones are not worth a pinning and go through staging. */
#define WB_PIN_MIN_BYTES (64u << 10)

struct wb_buf {
	void *mem;                 /* max layer bytes (+ alignment), pinned where the device pins */
	int pinned;
	struct wb_buf *next;       /* in the free list */
};

struct wb_push_s {
	struct dev_event *after_user, *copied;
	struct dev_event *begin;   /* timing, before the copies (traced pushes only) */
	uint64_t bytes;            /* copied by this push */
	uint32_t layer;
	uint8_t *present;          /* per tensor of the layer: pushed in this one */
	uint8_t *landed;           /* ... and not added from buf: LAND_BUFFER (a first
				      push since zeroing) or LAND_RING */
	const void **ring_src;     /* per tensor landed through the ring: its gradient */
	uint64_t ring_bytes;       /* of those, landed through the ring */
	struct wb_buf *buf;        /* staging, when something is added (NULL: all land) */
	uint32_t rows_tensor;      /* a push of rows (wb_push_rows) of this tensor, or NO_ROWS */
	uint64_t n_rows;
	uint32_t n_pieces;         /* ... copied in this many pieces of piece_rows rows: */
	uint64_t piece_rows;
	struct dev_event *piece[WB_ROW_PIECES - 1];   /* after each but the last (`copied`);
							 made at the slot's first push of rows */
	uint32_t f32_tensor;       /* a push of one fp32 gradient (wb_push_f32), or NO_ROWS */
	uint8_t direct;            /* ... copied straight into its accumulator (no buf) */
	struct wb_push_s *next;    /* in the free list or the worker's queue */
};

/* A tensor's gradient: zero (or never made); a sum in the fp32 accumulator;
 * stale (zeroed lazily, so that zeroing inside a backward pass costs
 * nothing: the next push overwrites, a read clears what no push wrote); or
 * one push in the landing buffer, in its own dtype, not yet widened; or
 * cleared: a stale accumulator the worker zeroed ahead, that no push and
 * no reader has touched since (rows go into it as into a fresh one). */
enum { HAS_ZERO = 0, HAS_SUM = 1, HAS_STALE = 2, HAS_LANDED = 3, HAS_CLEARED = 4 };

struct wb_layer {
	float **acc;               /* per tensor, NULL until first widened into */
	uint8_t *has;              /* per tensor: HAS_*, as the worker has applied */
	uint8_t *planned;          /* per tensor: 1 once a push since zeroing is queued */
	uint8_t *acc_pinned;       /* per tensor: 1 pinned in place, 2 pinning failed */
	uint8_t *rows;             /* per tensor: 1 once rows were pushed into it */
	void *land;                /* landing buffer (staging layout), made at first use */
	int land_pinned;
	uint64_t pushes;           /* accumulated since the last zeroing */
	uint32_t pending;          /* pushed, not yet accumulated */
	uint8_t widen_queued;      /* in wb.to_widen */
	uint8_t clear_queued;      /* in wb.to_clear */
};

/* Layers in the order they were queued, each at most once (n_layers
 * entries). */
struct layer_fifo {
	uint32_t *at;
	uint32_t head, n;
};

struct wb {
	struct dev *dev;
	const struct wsp_pack_s *pk;
	uint32_t n_layers, max_tensors;
	uint64_t max_bytes;
	unsigned add_threads;      /* threads adding one push (<= WB_ADD_THREADS) */
	uint8_t *scratch;          /* 4 x max_tensors: the worker's two, a reader's two */

	pthread_mutex_t lock;
	pthread_cond_t cond;       /* a push or buffer freed, a job queued or done, stop */
	struct wb_layer *layers;
	struct wb_push_s pushes[WB_PUSHES];
	struct wb_buf bufs[WB_BUFS];
	uint64_t buf_bytes;
	int started;               /* pushes and buffers made, the worker running */
	struct wb_push_s *free, *head, *tail;
	struct wb_buf *free_bufs;
	uint32_t pending_all;
	/* The worker's work ahead (ahead.c), under the lock: layers with
	 * landed tensors, in the order they landed, to widen; layers zeroed
	 * with an accumulator that takes rows, to clear.  A layer at a time,
	 * marked in `widening` (readers and zeroing of it wait, as for a
	 * pending push). */
	struct layer_fifo to_widen, to_clear;
	uint32_t widening;         /* the layer being widened or cleared, or NO_LAYER */
	int stop;
	pthread_t worker;
	struct wb_ring *ring;      /* NULL: every first push lands whole */
	struct wspi_err failed;     /* the first failure of a copy or an addition */
	int failed_code;
	uint64_t n_pushes, bytes_d2h;
	uint64_t add_ns;           /* time the worker spent adding (after each copy) */
	wsp_trace_fn trace;        /* D2H events, timed from `epoch` (host time epoch_ns) */
	void *trace_ctx;
	struct dev_event *epoch;
	uint64_t epoch_ns;
};

/* The event after piece k of push of rows p: the last is its `copied`. */
static inline struct dev_event *wb_piece_event(const struct wb_push_s *p, uint64_t k)
{
	return k + 1 < p->n_pieces ? p->piece[k] : p->copied;
}

/* Elements of a tensor (its bytes over its dtype's size). */
uint64_t wb_tensor_elements(const struct wsp_tensor *t);
/* An fp32 accumulator of n elements (uninitialised; NULL: out of memory):
 * whole pages from WB_PIN_MIN_BYTES up, so that pinning it pins nothing
 * else. */
float *wb_acc_alloc(uint64_t n);
/* Widen the landed tensors of a layer into its accumulators; which and
 * first: scratch of max_tensors bytes (the worker's, or a reader's). */
int wb_widen_landed(struct wb *wb, uint32_t layer, uint8_t *which, uint8_t *first,
		    struct wspi_err *err);
/* Zero n floats, split over up to `threads` threads. */
void wb_zero_floats(float *p, uint64_t n, unsigned threads);
/* Work ahead (ahead.c), all under wb->lock: after the worker applied p,
 * its layer is queued to widen if a tensor of it landed; at a zeroing, the
 * layer is queued to clear if one of its accumulators takes rows; whether
 * there is work ahead (none once stopping, or after a failure); and one
 * layer's work, unlocked while it runs (a negative code: the widening
 * failed, which the worker keeps for every later call). */
void wb_queue_widen(struct wb *wb, const struct wb_push_s *p);
void wb_queue_clear(struct wb *wb, uint32_t layer);
int wb_ahead_ready(const struct wb *wb);
int wb_work_ahead(struct wb *wb, struct wspi_err *err);
/* The worker thread (worker.c; its argument the wb), and a push slot back
 * to the free list with its staging buffer (under wb->lock). */
void *wb_worker_main(void *arg);
void wb_push_free(struct wb *wb, struct wb_push_s *p);
/* The worker's part of pushes ps[0..n), in queue order, once their
 * events are seen: their tensors that land through the ring issued into
 * it (*end: what wb_ring_wait then waits for; 0 where nothing was), then
 * rows or tensors added into (or landed for) the layers' accumulators.
 * n > 1 only for pushes without a staging buffer, none of which writes a
 * tensor another of them lands through the ring (nor one the ring still
 * lands from an earlier call: the worker sees to both).  Once the ring is
 * done to *end, wb_rings_landed marks the ring's tensors as sums. */
int wb_apply_pushes(struct wb *wb, struct wb_push_s *const *ps, uint32_t n, uint64_t *end,
		    struct wspi_err *err);
void wb_rings_landed(struct wb *wb, struct wb_push_s *const *ps, uint32_t n);

#endif
