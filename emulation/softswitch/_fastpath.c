/* The switch program and traffic manager of the software target, compiled.
 *
 * A line-for-line port of `reference_program.ReferenceSwitchProgram.ingress` and
 * `traffic_manager.TrafficManager` (the reference: read those for the why of
 * every rule), plus the two ends of the packet loop that cost a Python
 * forwarder most: reading a PACKET_MMAP ring and sending finished frames
 * (sendmmsg, one system call per run of frames to one port).
 *
 * Exactness: events live on one heap ordered by (time, push sequence) and are
 * pushed in the same order as the reference pushes them, times are computed
 * with the same floating-point expressions, and WRED draws its random numbers
 * from the same Python `random.Random(seed).random`, so the same frames at the
 * same times give the same output frames, times and counters
 * (tests/softswitch/test_fast_pipeline.py checks it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <poll.h>
#include <signal.h>
#include <time.h>

#define TIME_EPSILON_S 1e-9
#define PAUSE_QUANTUM_BITS 512
#define NEVER INFINITY
#define JOB_CLASSES 16 /* state.JOB_CLASSES: a 4-bit job class */
#define QUEUE_CLASSES 8 /* tm_config.QUEUE_CLASSES: strict priority, 7 first */

/* Rows of the class counter array [C_ROWS, n * QUEUE_CLASSES] (traffic_manager.class_*). */
enum { C_ENQUEUED, C_SENT, C_SENT_BYTES, C_MARKED, C_DROPPED, C_ROWS };

/* Rows of the job counter array [J_ROWS, n * JOB_CLASSES] (traffic_manager.job_*). */
enum { J_TX_PACKETS, J_TX_BYTES, J_MARKED_PACKETS, J_MARKED_BYTES, J_ROWS };

enum { ARRIVE = 0, DELIVER = 1, START = 2, REFRESH = 3 };

/* Rows of the counter array, in this order (ROW_NAMES below says which). */
enum {
    R_RX_PACKETS, R_RX_BYTES, R_TX_PACKETS, R_TX_BYTES, R_ECN_MARKED, R_WRED_DROPPED,
    R_TAIL_DROPPED, R_FORWARD_MISSES, R_TO_UNKNOWN_PORT, R_MALFORMED, R_RX_OVERRUNS,
    R_SEND_ERRORS, R_PFC_RECEIVED, R_MAC_CONTROL_IGNORED, R_PFC_PAUSES_SENT,
    R_PFC_RESUMES_SENT, R_ECN_MARKED_BYTES, R_WRED_DROPPED_BYTES, R_TAIL_DROPPED_BYTES,
    R_RX_BROADCAST, R_RX_MULTICAST, R_PORT_DOWN, R_PFC_PAUSED_US,
    N_ROWS
};
static const char *ROW_NAMES[N_ROWS] = {
    "rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "ecn_marked", "wred_dropped",
    "tail_dropped", "forward_misses", "to_unknown_port", "malformed", "rx_overruns",
    "send_errors", "pfc_received", "mac_control_ignored", "pfc_pauses_sent",
    "pfc_resumes_sent", "ecn_marked_bytes", "wred_dropped_bytes", "tail_dropped_bytes",
    "rx_broadcast", "rx_multicast", "port_down", "pfc_paused_us",
};

typedef struct {
    double when;
    uint64_t seq;
    int kind;
    int port;
    PyObject *frame; /* owned reference, or NULL */
} Event;

typedef struct {
    PyObject *frame; /* owned */
    int in_port;
    long cells;
    int marked;
    int job_class;
} Queued;

typedef struct {
    Queued *items;
    Py_ssize_t head, len, cap;
} Queue;

typedef struct {
    PyObject_HEAD
    int n;
    /* configuration */
    double *seconds_per_byte, *cable_delay, *pause_seconds;
    long *queue_limit;
    int *cable_peer;
    unsigned char *valid;
    long wire_overhead, cell_bytes, buffer_cells, xoff_cells, xon_cells;
    int pfc_enabled;
    PyObject *forward, *wred, *random;
    PyObject *job_by_dst, *job_by_src; /* socket key -> job class (state.socket_key) */
    PyObject *queue_by_dscp, *queue_by_flow; /* DSCP / state.flow_key -> queue class */
    PyObject **pause_frame, **resume_frame;
    /* per queue class: its own WRED profile (cw_set), PFC enabled / XOFF / XON; and per
     * (port, class) at port * QUEUE_CLASSES + class: queue limit and pause frames */
    int cw_set[QUEUE_CLASSES], cpfc_enabled[QUEUE_CLASSES];
    double cw_min[QUEUE_CLASSES], cw_max[QUEUE_CLASSES], cw_prob[QUEUE_CLASSES];
    long cxoff[QUEUE_CLASSES], cxon[QUEUE_CLASSES];
    long *class_limit;
    PyObject **class_pause_frame, **class_resume_frame;
    /* the WRED profile last read per port (owned; frozen, so its fields stay valid) */
    PyObject **wred_obj;
    double *wred_min, *wred_max, *wred_prob;
    /* state; queues, class_cells, ingress_class_*, refresh_at and has_refresh are per
     * (port, class), at port * QUEUE_CLASSES + class */
    Queue *queues;
    long *queue_cells, *peak_queue_cells, *ingress_cells, *class_cells, *ingress_class_cells;
    unsigned char *ingress_class_paused;
    double *tx_free_at, *paused_until, *start_at, *last_reception, *last_arrival, *refresh_at;
    double *paused_since; /* when some class of the ingress port was first paused */
    unsigned char *ingress_paused, *has_refresh;
    long buffered_cells;
    double now, limit;
    Event *heap;
    Py_ssize_t heap_len, heap_cap;
    uint64_t seq;
    /* counters: int64 [N_ROWS, n], C-contiguous, owned by the caller's numpy array */
    PyObject *counts_obj;
    Py_buffer counts_view;
    int64_t *counts;
    /* job counters: int64 [J_ROWS, n * JOB_CLASSES]; deepest queue found per port, int64 [n]
     * (zeroed by its reader); both owned by the caller's numpy arrays (or ours) */
    PyObject *job_obj, *depth_obj;
    Py_buffer job_view, depth_view;
    int64_t *job_counts, *max_depth;
    /* per (port, queue class) counters: int64 [C_ROWS, n * QUEUE_CLASSES] (caller's or ours) */
    PyObject *class_obj;
    Py_buffer class_view;
    int64_t *class_counts;
    /* departure lateness histogram: int64 [buckets], plus the largest lateness */
    PyObject *late_obj;
    Py_buffer late_view;
    int64_t *late;
    Py_ssize_t late_buckets;
    double late_max;
    /* outputs */
    PyObject *transmitted, *transmitted_due, *control;
    /* the rings run() reads (add_ring), their mappings held while registered */
    struct Ring {
        int port;
        Py_buffer view;
        Py_ssize_t slots, slot_bytes, next;
    } *rings;
    int n_rings;
    /* wake-up lateness histogram of run() (LATENESS_BUCKETS int64), and its max */
    PyObject *wakeup_obj;
    Py_buffer wakeup_view;
    int64_t *wakeup;
    Py_ssize_t wakeup_buckets;
    double wakeup_max;
    Py_ssize_t stamp_fallbacks, truncated;
    /* the sample ring (sample_ring.py) run() writes every `sample_interval` s, if set */
    PyObject *ring_obj;
    Py_buffer ring_view;
    int64_t *ring;
    int *ring_ports;
    Py_ssize_t ring_n_ports, ring_slots, ring_slot_words;
    double sample_interval, next_sample;
} Pipeline;

/* sample_ring.py's layout */
#define RING_HEADER_WORDS 8
#define SLOT_HEAD_WORDS 4
#define SAMPLE_VALUES 3

#define COUNT(p, row, port) ((p)->counts[(Py_ssize_t)(row) * (p)->n + (port)])
#define CLASS_COUNT(p, row, cell) \
    ((p)->class_counts[(Py_ssize_t)(row) * (p)->n * QUEUE_CLASSES + (cell)])
#define JOB_COUNT(p, row, cell) ((p)->job_counts[(Py_ssize_t)(row) * (p)->n * JOB_CLASSES + (cell)])

/* --- the heap (same order as heapq over (time, sequence, ...) tuples) ------------- */

static inline int ev_less(const Event *a, const Event *b) {
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static int heap_push(Pipeline *p, double when, int kind, int port, PyObject *frame) {
    if (p->heap_len == p->heap_cap) {
        Py_ssize_t cap = p->heap_cap ? 2 * p->heap_cap : 1024;
        Event *grown = PyMem_Realloc(p->heap, cap * sizeof(Event));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        p->heap = grown;
        p->heap_cap = cap;
    }
    Event e = {when, p->seq++, kind, port, frame};
    Py_XINCREF(frame);
    Py_ssize_t i = p->heap_len++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) >> 1;
        if (!ev_less(&e, &p->heap[parent])) break;
        p->heap[i] = p->heap[parent];
        i = parent;
    }
    p->heap[i] = e;
    return 0;
}

/* Removes the top event; the caller takes over its frame reference. */
static Event heap_pop(Pipeline *p) {
    Event top = p->heap[0];
    Event last = p->heap[--p->heap_len];
    Py_ssize_t n = p->heap_len, i = 0;
    while (1) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && ev_less(&p->heap[child + 1], &p->heap[child])) child++;
        if (!ev_less(&p->heap[child], &last)) break;
        p->heap[i] = p->heap[child];
        i = child;
    }
    if (n > 0) p->heap[i] = last;
    return top;
}

/* --- queues -------------------------------------------------------------------- */

static int queue_append(Queue *q, PyObject *frame, int in_port, long cells, int marked,
                        int job_class) {
    if (q->len == q->cap) {
        Py_ssize_t cap = q->cap ? 2 * q->cap : 64;
        Queued *items = PyMem_Malloc(cap * sizeof(Queued));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < q->len; i++) items[i] = q->items[(q->head + i) % q->cap];
        PyMem_Free(q->items);
        q->items = items;
        q->head = 0;
        q->cap = cap;
    }
    Queued *slot = &q->items[(q->head + q->len) % q->cap];
    Py_INCREF(frame);
    slot->frame = frame;
    slot->in_port = in_port;
    slot->cells = cells;
    slot->marked = marked;
    slot->job_class = job_class;
    q->len++;
    return 0;
}

static Queued queue_popleft(Queue *q) {
    Queued item = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return item;
}

/* --- frames -------------------------------------------------------------------- */

/* packet.ipv4_offset: offset of a well-formed IPv4 header, -1 not IPv4, -2 malformed. */
static Py_ssize_t ipv4_offset(const unsigned char *f, Py_ssize_t n) {
    if (n < 14) return -2;
    int ethertype = (f[12] << 8) | f[13];
    Py_ssize_t offset = 14;
    if (ethertype == 0x8100) {
        if (n < 18) return -2;
        ethertype = (f[16] << 8) | f[17];
        offset = 18;
    }
    if (ethertype != 0x0800) return -1;
    if (n < offset + 20) return -2;
    int version_ihl = f[offset], ihl = version_ihl & 15;
    if (version_ihl >> 4 != 4 || ihl < 5 || n < offset + 4 * ihl) return -2;
    int total_length = (f[offset + 2] << 8) | f[offset + 3];
    if (total_length < 4 * ihl) return -2;
    return offset;
}

/* packet.set_ce: ECN to CE, checksum patched incrementally (RFC 1624). */
static void set_ce(unsigned char *f, Py_ssize_t o) {
    unsigned word_old = (f[o] << 8) | f[o + 1];
    unsigned word_new = word_old | 3;
    if (word_new == word_old) return;
    unsigned checksum = (f[o + 10] << 8) | f[o + 11];
    unsigned total = (~checksum & 0xFFFF) + (~word_old & 0xFFFF) + word_new;
    total = (total & 0xFFFF) + (total >> 16);
    total = (total & 0xFFFF) + (total >> 16);
    checksum = ~total & 0xFFFF;
    f[o + 1] = word_new & 0xFF;
    f[o + 10] = checksum >> 8;
    f[o + 11] = checksum & 0xFF;
}

/* --- the traffic manager --------------------------------------------------------- */

static int tm_advance(Pipeline *p, double now);
static int ingress(Pipeline *p, int port, PyObject *frame, double now);

static int append_pair(PyObject *list, int port, PyObject *frame) {
    PyObject *pair = Py_BuildValue("(iO)", port, frame);
    if (pair == NULL) return -1;
    int rc = PyList_Append(list, pair);
    Py_DECREF(pair);
    return rc;
}

static int append_transmitted(Pipeline *p, int port, PyObject *frame, double due) {
    if (append_pair(p->transmitted, port, frame) < 0) return -1;
    PyObject *when = PyFloat_FromDouble(due);
    if (when == NULL) return -1;
    int rc = PyList_Append(p->transmitted_due, when);
    Py_DECREF(when);
    return rc;
}

static int schedule_start(Pipeline *p, int port, double now) {
    if (p->queue_cells[port] == 0) return 0;
    double when = now;
    if (p->tx_free_at[port] > when) when = p->tx_free_at[port];
    if (p->paused_until[port] > when) when = p->paused_until[port];
    if (when < p->start_at[port]) {
        p->start_at[port] = when;
        return heap_push(p, when, START, port, NULL);
    }
    return 0;
}

/* `key`: port * QUEUE_CLASSES + class, the class whose pause this is. */
static int send_pause(Pipeline *p, int key, double now) {
    int port = key / QUEUE_CLASSES;
    if (p->class_pause_frame[key] != NULL) {
        if (append_pair(p->control, port, p->class_pause_frame[key]) < 0) return -1;
        COUNT(p, R_PFC_PAUSES_SENT, port)++; /* every frame, refreshes included */
    }
    double when = now + p->pause_seconds[port] / 2;
    p->refresh_at[key] = when;
    p->has_refresh[key] = 1;
    return heap_push(p, when, REFRESH, key, NULL);
}

static int pause_upstream(Pipeline *p, int in_port, int queue_class, double now) {
    if (!p->ingress_paused[in_port]) p->paused_since[in_port] = now;
    p->ingress_class_paused[in_port * QUEUE_CLASSES + queue_class] = 1;
    p->ingress_paused[in_port] = 1;
    int peer = p->cable_peer[in_port];
    if (peer >= 0) {
        COUNT(p, R_PFC_PAUSES_SENT, in_port)++; /* no frame inside the chip: one per pause */
        p->paused_until[peer] = NEVER;
        return 0;
    }
    return send_pause(p, in_port * QUEUE_CLASSES + queue_class, now);
}

static int resume_upstream(Pipeline *p, int in_port, int queue_class, double now) {
    int base = in_port * QUEUE_CLASSES, still_paused = 0;
    p->ingress_class_paused[base + queue_class] = 0;
    for (int c = 0; c < QUEUE_CLASSES; c++) still_paused |= p->ingress_class_paused[base + c];
    p->ingress_paused[in_port] = (unsigned char)still_paused;
    if (!still_paused) /* TrafficManager.pfc_paused_us */
        COUNT(p, R_PFC_PAUSED_US, in_port) += (int64_t)((now - p->paused_since[in_port]) * 1e6);
    COUNT(p, R_PFC_RESUMES_SENT, in_port)++;
    int peer = p->cable_peer[in_port];
    if (peer >= 0) {
        if (still_paused) return 0;
        p->paused_until[peer] = now;
        return schedule_start(p, peer, now);
    }
    p->has_refresh[base + queue_class] = 0;
    if (p->class_resume_frame[base + queue_class] != NULL)
        return append_pair(p->control, in_port, p->class_resume_frame[base + queue_class]);
    return 0;
}

/* TrafficManager._start (steals nothing: `frame` stays the caller's). */
static int tm_start(Pipeline *p, int port, PyObject *frame, double now, int marked,
                    int job_class) {
    Py_ssize_t length = PyBytes_GET_SIZE(frame);
    double end = now + (double)(length + p->wire_overhead) * p->seconds_per_byte[port];
    p->tx_free_at[port] = end;
    COUNT(p, R_TX_PACKETS, port)++;
    COUNT(p, R_TX_BYTES, port) += length;
    Py_ssize_t cell = (Py_ssize_t)port * JOB_CLASSES + job_class;
    JOB_COUNT(p, J_TX_PACKETS, cell)++;
    JOB_COUNT(p, J_TX_BYTES, cell) += length;
    if (marked) {
        COUNT(p, R_ECN_MARKED, port)++;
        COUNT(p, R_ECN_MARKED_BYTES, port) += length;
        JOB_COUNT(p, J_MARKED_PACKETS, cell)++;
        JOB_COUNT(p, J_MARKED_BYTES, cell) += length;
    }
    int peer = p->cable_peer[port];
    if (peer >= 0) return heap_push(p, end + p->cable_delay[port], ARRIVE, peer, frame);
    if (end <= p->limit && (p->heap_len == 0 || end < p->heap[0].when))
        return append_transmitted(p, port, frame, end);
    return heap_push(p, end, DELIVER, port, frame);
}

static int tm_serve(Pipeline *p, int port, double now) {
    if (p->queue_cells[port] == 0) return 0;
    if (p->tx_free_at[port] > now + TIME_EPSILON_S || p->paused_until[port] > now)
        return schedule_start(p, port, now);
    int queue_class = QUEUE_CLASSES - 1; /* strict priority: the highest non-empty class */
    while (queue_class > 0 && p->queues[port * QUEUE_CLASSES + queue_class].len == 0)
        queue_class--;
    Queued item = queue_popleft(&p->queues[port * QUEUE_CLASSES + queue_class]);
    p->queue_cells[port] -= item.cells;
    int qcell = port * QUEUE_CLASSES + queue_class;
    p->class_cells[qcell] -= item.cells;
    CLASS_COUNT(p, C_SENT, qcell)++;
    CLASS_COUNT(p, C_SENT_BYTES, qcell) += PyBytes_GET_SIZE(item.frame);
    if (item.marked) CLASS_COUNT(p, C_MARKED, qcell)++;
    p->buffered_cells -= item.cells;
    p->ingress_cells[item.in_port] -= item.cells;
    int pcell = item.in_port * QUEUE_CLASSES + queue_class;
    long held = p->ingress_class_cells[pcell] - item.cells;
    p->ingress_class_cells[pcell] = held;
    int rc = tm_start(p, port, item.frame, now, item.marked, item.job_class);
    Py_DECREF(item.frame);
    if (rc < 0) return -1;
    if (p->ingress_class_paused[pcell] && held <= p->cxon[queue_class]) {
        if (resume_upstream(p, item.in_port, queue_class, now) < 0) return -1;
    }
    if (p->queue_cells[port]) return schedule_start(p, port, now);
    return 0;
}

static int wred_field(PyObject *profile, const char *name, double *out) {
    PyObject *value = PyObject_GetAttrString(profile, name);
    if (value == NULL) return -1;
    *out = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* TrafficManager.enqueue */
static int tm_enqueue(Pipeline *p, PyObject *frame, int in_port, int out_port, double now,
                      int job_class, int queue_class) {
    if (p->heap_len && p->heap[0].when < now) {
        if (tm_advance(p, now) < 0) return -1;
    }
    long depth = p->queue_cells[out_port];
    Py_ssize_t length = PyBytes_GET_SIZE(frame);
    int qcell = out_port * QUEUE_CLASSES + queue_class;
    if (COUNT(p, R_PORT_DOWN, out_port)) { /* its link is down (the loop's flag) */
        COUNT(p, R_TAIL_DROPPED, out_port)++;
        COUNT(p, R_TAIL_DROPPED_BYTES, out_port) += length;
        CLASS_COUNT(p, C_DROPPED, qcell)++;
        return 0;
    }
    if (depth == 0 && p->tx_free_at[out_port] <= now + TIME_EPSILON_S &&
        p->paused_until[out_port] <= now) {
        double end = now + (double)(length + p->wire_overhead) * p->seconds_per_byte[out_port];
        p->tx_free_at[out_port] = end;
        COUNT(p, R_TX_PACKETS, out_port)++;
        COUNT(p, R_TX_BYTES, out_port) += length;
        Py_ssize_t cell = (Py_ssize_t)out_port * JOB_CLASSES + job_class;
        JOB_COUNT(p, J_TX_PACKETS, cell)++;
        JOB_COUNT(p, J_TX_BYTES, cell) += length;
        CLASS_COUNT(p, C_ENQUEUED, qcell)++;
        CLASS_COUNT(p, C_SENT, qcell)++;
        CLASS_COUNT(p, C_SENT_BYTES, qcell) += length;
        int peer = p->cable_peer[out_port];
        if (peer >= 0)
            return heap_push(p, end + p->cable_delay[out_port], ARRIVE, peer, frame);
        if (end <= p->limit && (p->heap_len == 0 || end < p->heap[0].when))
            return append_transmitted(p, out_port, frame, end);
        return heap_push(p, end, DELIVER, out_port, frame);
    }
    if (depth > p->max_depth[out_port]) p->max_depth[out_port] = depth; /* a dropped one too */
    long cells = (long)((length + p->cell_bytes - 1) / p->cell_bytes);
    int marked_here = 0;
    PyObject *owned = NULL; /* a CE-marked copy */
    long class_depth = p->class_cells[qcell]; /* what WRED and the class limit see */
    int has_profile = 0;
    double min_cells = 0, max_cells = 0, max_prob = 0;
    if (p->cw_set[queue_class]) { /* the class's own profile */
        has_profile = 1;
        min_cells = p->cw_min[queue_class];
        max_cells = p->cw_max[queue_class];
        max_prob = p->cw_prob[queue_class];
    } else {
        PyObject *key = PyLong_FromLong(out_port);
        if (key == NULL) return -1;
        PyObject *profile = PyDict_GetItemWithError(p->wred, key);
        Py_DECREF(key);
        if (profile == NULL && PyErr_Occurred()) return -1;
        if (profile != NULL && profile != Py_None) {
            if (profile != p->wred_obj[out_port]) {
                if (wred_field(profile, "min_cells", &p->wred_min[out_port]) < 0 ||
                    wred_field(profile, "max_cells", &p->wred_max[out_port]) < 0 ||
                    wred_field(profile, "max_prob_percent", &p->wred_prob[out_port]) < 0)
                    return -1;
                Py_INCREF(profile);
                Py_XSETREF(p->wred_obj[out_port], profile);
            }
            has_profile = 1;
            min_cells = p->wred_min[out_port];
            max_cells = p->wred_max[out_port];
            max_prob = p->wred_prob[out_port];
        }
    }
    if (has_profile) {
        if (class_depth > min_cells) {
            int mark = 1;
            if (!(class_depth > max_cells)) {
                PyObject *drawn = PyObject_CallNoArgs(p->random);
                if (drawn == NULL) return -1;
                double r = PyFloat_AsDouble(drawn);
                Py_DECREF(drawn);
                mark = r * 100.0 * (max_cells - min_cells) < max_prob * (class_depth - min_cells);
            }
            if (mark) {
                const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(frame);
                Py_ssize_t offset = ipv4_offset(bytes, length);
                int ecn = offset >= 0 ? (bytes[offset + 1] & 3) : -1;
                if (ecn == 1 || ecn == 2) {
                    owned = PyBytes_FromStringAndSize((const char *)bytes, length);
                    if (owned == NULL) return -1;
                    set_ce((unsigned char *)PyBytes_AS_STRING(owned), offset);
                    frame = owned;
                    marked_here = 1;
                } else if (ecn != 3) {
                    COUNT(p, R_WRED_DROPPED, out_port)++;
                    COUNT(p, R_WRED_DROPPED_BYTES, out_port) += length;
                    CLASS_COUNT(p, C_DROPPED, qcell)++;
                    return 0;
                }
            }
        }
    }
    if (class_depth + cells > p->class_limit[qcell] || depth + cells > p->queue_limit[out_port] ||
        p->buffered_cells + cells > p->buffer_cells) {
        COUNT(p, R_TAIL_DROPPED, out_port)++;
        COUNT(p, R_TAIL_DROPPED_BYTES, out_port) += length;
        CLASS_COUNT(p, C_DROPPED, qcell)++;
        Py_XDECREF(owned);
        return 0;
    }
    if (depth == 0 && p->tx_free_at[out_port] < now) p->tx_free_at[out_port] = now;
    int rc = queue_append(&p->queues[qcell], frame, in_port, cells, marked_here, job_class);
    Py_XDECREF(owned);
    if (rc < 0) return -1;
    p->class_cells[qcell] = class_depth + cells;
    CLASS_COUNT(p, C_ENQUEUED, qcell)++;
    depth += cells;
    p->queue_cells[out_port] = depth;
    if (depth > p->peak_queue_cells[out_port]) p->peak_queue_cells[out_port] = depth;
    p->buffered_cells += cells;
    if (depth == cells && schedule_start(p, out_port, now) < 0) return -1;
    p->ingress_cells[in_port] += cells;
    int pcell = in_port * QUEUE_CLASSES + queue_class;
    long held = p->ingress_class_cells[pcell] + cells;
    p->ingress_class_cells[pcell] = held;
    if (held > p->cxoff[queue_class] && p->cpfc_enabled[queue_class] &&
        !p->ingress_class_paused[pcell])
        return pause_upstream(p, in_port, queue_class, now);
    return 0;
}

/* TrafficManager.receive_pause, for a vector and eight quanta. */
static int tm_receive_pause(Pipeline *p, int port, int enable, const long *quanta, double now) {
    long longest = -1;
    for (int i = 0; i < 8; i++)
        if ((enable >> i & 1) && quanta[i] > longest) longest = quanta[i];
    if (longest < 0) return 0;
    double seconds = (double)(longest * PAUSE_QUANTUM_BITS) * p->seconds_per_byte[port] / 8;
    p->paused_until[port] = now + seconds;
    p->start_at[port] = NEVER;
    return schedule_start(p, port, now);
}

/* One job-class table: the class of socket key (address << 16 | port), -1 on a miss,
 * -2 on an error. */
static int job_lookup(PyObject *table, uint64_t key_value) {
    if (table == NULL || PyDict_GET_SIZE(table) == 0) return -1;
    PyObject *key = PyLong_FromUnsignedLongLong(key_value);
    if (key == NULL) return -2;
    PyObject *found = PyDict_GetItemWithError(table, key);
    Py_DECREF(key);
    if (found == NULL) return PyErr_Occurred() ? -2 : -1;
    long job_class = PyLong_AsLong(found);
    if (job_class == -1 && PyErr_Occurred()) return -2;
    return (int)(job_class & (JOB_CLASSES - 1));
}

/* reference_program.job_class: job_by_dst, then job_by_src, for option-less IPv4 with
 * TCP or UDP at fragment offset 0; 0 for no job, -1 on an error. */
static int find_job_class(Pipeline *p, const unsigned char *f, Py_ssize_t n) {
    if (n < 38 || f[12] != 8 || f[13] != 0 || f[14] != 0x45 || (f[23] != 6 && f[23] != 17) ||
        (f[20] & 0x1F) || f[21])
        return 0;
    uint64_t dst = ((uint64_t)f[30] << 40) | ((uint64_t)f[31] << 32) | ((uint64_t)f[32] << 24) |
                   ((uint64_t)f[33] << 16) | ((uint64_t)f[36] << 8) | f[37];
    int found = job_lookup(p->job_by_dst, dst);
    if (found == -1) {
        uint64_t src = ((uint64_t)f[26] << 40) | ((uint64_t)f[27] << 32) |
                       ((uint64_t)f[28] << 24) | ((uint64_t)f[29] << 16) |
                       ((uint64_t)f[34] << 8) | f[35];
        found = job_lookup(p->job_by_src, src);
    }
    if (found == -2) return -1;
    return found < 0 ? 0 : found;
}

/* reference_program.queue_class: queue_by_flow (the 5-tuple of option-less IPv4 with TCP
 * or UDP at fragment offset 0), then queue_by_dscp (any option-less IPv4); 0 when neither
 * has it, -1 on an error. */
static int find_queue_class(Pipeline *p, const unsigned char *f, Py_ssize_t n) {
    int by_dscp = p->queue_by_dscp != NULL && PyDict_GET_SIZE(p->queue_by_dscp) > 0;
    int by_flow = p->queue_by_flow != NULL && PyDict_GET_SIZE(p->queue_by_flow) > 0;
    if (!by_dscp && !by_flow) return 0;
    if (n < 34 || f[12] != 8 || f[13] != 0 || f[14] != 0x45) return 0;
    PyObject *found = NULL, *key;
    if (by_flow && n >= 38 && (f[23] == 6 || f[23] == 17) && !(f[20] & 0x1F) && !f[21]) {
        unsigned char flow[13];
        memcpy(flow, f + 26, 8);
        flow[8] = f[23];
        memcpy(flow + 9, f + 34, 4);
        key = PyBytes_FromStringAndSize((const char *)flow, 13);
        if (key == NULL) return -1;
        found = PyDict_GetItemWithError(p->queue_by_flow, key);
        Py_DECREF(key);
        if (found == NULL && PyErr_Occurred()) return -1;
    }
    if (found == NULL && by_dscp) {
        key = PyLong_FromLong(f[15] >> 2);
        if (key == NULL) return -1;
        found = PyDict_GetItemWithError(p->queue_by_dscp, key);
        Py_DECREF(key);
        if (found == NULL && PyErr_Occurred()) return -1;
    }
    if (found == NULL) return 0;
    long queue_class = PyLong_AsLong(found);
    if (queue_class == -1 && PyErr_Occurred()) return -1;
    return (int)(queue_class & (QUEUE_CLASSES - 1));
}

/* ReferenceSwitchProgram.ingress */
static int ingress(Pipeline *p, int port, PyObject *frame, double now) {
    Py_ssize_t n = PyBytes_GET_SIZE(frame);
    const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(frame);
    if (n < 14) {
        COUNT(p, R_MALFORMED, port)++;
        return 0;
    }
    if (f[12] == 0x88 && f[13] == 0x08) {
        long quanta[8];
        if (n >= 14 + 20 && f[14] == 0x01 && f[15] == 0x01) {
            int enable = (f[16] << 8) | f[17];
            for (int i = 0; i < 8; i++) quanta[i] = (f[18 + 2 * i] << 8) | f[19 + 2 * i];
            COUNT(p, R_PFC_RECEIVED, port)++;
            return tm_receive_pause(p, port, enable, quanta, now);
        }
        if (n >= 18 && f[14] == 0x00 && f[15] == 0x01) {
            for (int i = 0; i < 8; i++) quanta[i] = (f[16] << 8) | f[17];
            COUNT(p, R_PFC_RECEIVED, port)++;
            return tm_receive_pause(p, port, 0xFF, quanta, now);
        }
        COUNT(p, R_MAC_CONTROL_IGNORED, port)++;
        return 0;
    }
    if (f[12] == 8 && f[13] == 0) {
        int version_ihl = n > 14 ? f[14] : 0;
        if (n < 34 || version_ihl >> 4 != 4 || (version_ihl & 15) < 5 ||
            n < 14 + 4 * (version_ihl & 15)) {
            COUNT(p, R_MALFORMED, port)++;
            return 0;
        }
    }
    COUNT(p, R_RX_PACKETS, port)++;
    COUNT(p, R_RX_BYTES, port) += n;
    if (f[0] & 1) { /* group address: broadcast (all ones) or multicast */
        int all_ones = f[0] == 0xff && f[1] == 0xff && f[2] == 0xff && f[3] == 0xff &&
                       f[4] == 0xff && f[5] == 0xff;
        COUNT(p, all_ones ? R_RX_BROADCAST : R_RX_MULTICAST, port)++;
    }
    PyObject *key = Py_BuildValue("(iy#)", port, (const char *)f, (Py_ssize_t)6);
    if (key == NULL) return -1;
    PyObject *found = PyDict_GetItemWithError(p->forward, key);
    Py_DECREF(key);
    if (found == NULL) {
        if (PyErr_Occurred()) return -1;
        COUNT(p, R_FORWARD_MISSES, port)++;
        return 0;
    }
    long out_port = PyLong_AsLong(found);
    if (out_port == -1 && PyErr_Occurred()) return -1;
    if (out_port < 0 || out_port >= p->n || !p->valid[out_port]) {
        COUNT(p, R_TO_UNKNOWN_PORT, port)++;
        return 0;
    }
    int job_class = find_job_class(p, f, n);
    if (job_class < 0) return -1;
    int queue_class = find_queue_class(p, f, n);
    if (queue_class < 0) return -1;
    return tm_enqueue(p, frame, port, (int)out_port, now, job_class, queue_class);
}

/* A frame the kernel showed late (virtual time already passed its reception) keeps its
 * stamp's spacing behind the previous frame, at most one serialisation time, rather than
 * joining a group at `now`: see TrafficManager.receive. */
static int tm_receive(Pipeline *p, int port, PyObject *frame, double stamp) {
    double serialisation =
        (double)(PyBytes_GET_SIZE(frame) + p->wire_overhead) * p->seconds_per_byte[port];
    double arrival = stamp + serialisation, spacing = arrival - p->last_arrival[port];
    p->last_arrival[port] = arrival;
    double when;
    if (arrival < p->now) {
        if (spacing < 0.0) spacing = 0.0;
        if (spacing > serialisation) spacing = serialisation;
        when = p->last_reception[port] + spacing;
        if (when < p->now) when = p->now;
    } else {
        when = arrival > p->last_reception[port] ? arrival : p->last_reception[port];
    }
    p->last_reception[port] = when;
    return heap_push(p, when, ARRIVE, port, frame);
}

/* Runs every event due by `now`; returns how many it ran (a frame dropped at ingress
 * changes counters and sends nothing: the caller must still flush them), -1 on an error. */
static int tm_advance(Pipeline *p, double now) {
    double limit = now + TIME_EPSILON_S;
    if (p->heap_len == 0 || p->heap[0].when > limit) {
        if (now > p->now) p->now = now;
        return 0;
    }
    double outer_limit = p->limit;
    if (limit > outer_limit) p->limit = limit;
    int rc = 0, ran = 0;
    while (p->heap_len && p->heap[0].when <= limit) {
        Event e = heap_pop(p);
        ran++;
        if (e.when > p->now) p->now = e.when;
        if (e.kind == ARRIVE) {
            rc = ingress(p, e.port, e.frame, e.when);
        } else if (e.kind == DELIVER) {
            rc = append_transmitted(p, e.port, e.frame, e.when);
        } else if (e.kind == START) {
            if (p->start_at[e.port] == e.when) {
                p->start_at[e.port] = NEVER;
                rc = tm_serve(p, e.port, e.when);
            }
        } else if (p->has_refresh[e.port] && p->refresh_at[e.port] == e.when) {
            rc = send_pause(p, e.port, e.when);
        }
        Py_XDECREF(e.frame);
        if (rc < 0) break;
    }
    p->limit = outer_limit;
    if (now > p->now) p->now = now;
    return rc < 0 ? rc : ran;
}

/* --- the Python type ---------------------------------------------------------------- */

static void pipeline_dealloc(Pipeline *p) {
    for (Py_ssize_t i = 0; i < p->heap_len; i++) Py_XDECREF(p->heap[i].frame);
    PyMem_Free(p->heap);
    if (p->queues != NULL) {
        for (int qcell = 0; qcell < p->n * QUEUE_CLASSES; qcell++) {
            Queue *q = &p->queues[qcell];
            for (Py_ssize_t i = 0; i < q->len; i++) Py_DECREF(q->items[(q->head + i) % q->cap].frame);
            PyMem_Free(q->items);
        }
        PyMem_Free(p->queues);
    }
    if (p->pause_frame != NULL) {
        for (int port = 0; port < p->n; port++) {
            Py_XDECREF(p->pause_frame[port]);
            Py_XDECREF(p->resume_frame[port]);
        }
    }
    if (p->wred_obj != NULL) {
        for (int port = 0; port < p->n; port++) Py_XDECREF(p->wred_obj[port]);
    }
    if (p->class_pause_frame != NULL) {
        for (int key = 0; key < p->n * QUEUE_CLASSES; key++) {
            Py_XDECREF(p->class_pause_frame[key]);
            Py_XDECREF(p->class_resume_frame[key]);
        }
    }
    void *arrays[] = {p->seconds_per_byte, p->cable_delay, p->pause_seconds, p->queue_limit,
                      p->cable_peer, p->valid, p->pause_frame, p->resume_frame,
                      p->queue_cells, p->peak_queue_cells, p->ingress_cells, p->tx_free_at,
                      p->paused_until, p->start_at, p->last_reception, p->last_arrival, p->refresh_at,
                      p->ingress_paused, p->has_refresh, p->wred_obj, p->wred_min,
                      p->wred_max, p->wred_prob, p->class_limit, p->class_pause_frame,
                      p->class_resume_frame, p->class_cells, p->ingress_class_cells,
                      p->ingress_class_paused, p->paused_since};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) PyMem_Free(arrays[i]);
    for (int i = 0; i < p->n_rings; i++) PyBuffer_Release(&p->rings[i].view);
    PyMem_Free(p->rings);
    if (p->wakeup_obj != NULL) PyBuffer_Release(&p->wakeup_view);
    Py_XDECREF(p->wakeup_obj);
    if (p->counts_obj != NULL) PyBuffer_Release(&p->counts_view);
    if (p->job_obj != NULL) PyBuffer_Release(&p->job_view);
    if (p->class_obj != NULL) PyBuffer_Release(&p->class_view);
    Py_XDECREF(p->class_obj);
    if (p->ring_obj != NULL) PyBuffer_Release(&p->ring_view);
    Py_XDECREF(p->ring_obj);
    PyMem_Free(p->ring_ports);
    if (p->depth_obj != NULL) PyBuffer_Release(&p->depth_view);
    Py_XDECREF(p->job_obj);
    Py_XDECREF(p->depth_obj);
    Py_XDECREF(p->job_by_dst);
    Py_XDECREF(p->job_by_src);
    Py_XDECREF(p->queue_by_dscp);
    Py_XDECREF(p->queue_by_flow);
    if (p->late_obj != NULL) PyBuffer_Release(&p->late_view);
    Py_XDECREF(p->counts_obj);
    Py_XDECREF(p->late_obj);
    Py_XDECREF(p->forward);
    Py_XDECREF(p->wred);
    Py_XDECREF(p->random);
    Py_XDECREF(p->transmitted);
    Py_XDECREF(p->transmitted_due);
    Py_XDECREF(p->control);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int fill_doubles(PyObject *seq, double *out, int n, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %d values expected", what, n);
        Py_DECREF(fast);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static int fill_longs(PyObject *seq, long *out, int n, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %d values expected", what, n);
        Py_DECREF(fast);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        out[i] = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static int get_int64_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t items, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->len != items * 8 || view->format == NULL ||
        (strcmp(view->format, "l") != 0 && strcmp(view->format, "q") != 0 &&
         strcmp(view->format, "<q") != 0 && strcmp(view->format, "<l") != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: a C-contiguous int64 array of %zd items expected",
                     what, items);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Pipeline(n, seconds_per_byte, queue_limit, cable_peer, cable_delay, pause_seconds,
 *          valid_ports, pause_frames, resume_frames, wire_overhead, cell_bytes,
 *          buffer_cells, pfc_enabled, xoff_cells, xon_cells, forward, wred, random,
 *          counts, lateness) */
static int pipeline_init(Pipeline *p, PyObject *args, PyObject *kwds) {
    int n, pfc_enabled;
    PyObject *spb, *qlimit, *peer, *delay, *pause_s, *valid, *pause_frames, *resume_frames;
    PyObject *forward, *wred, *random, *counts, *lateness, *wakeup = NULL;
    PyObject *job_by_dst = NULL, *job_by_src = NULL, *job_counts = NULL, *max_depth = NULL;
    PyObject *queue_by_dscp = NULL, *queue_by_flow = NULL, *class_limit = NULL;
    PyObject *class_wred = NULL, *class_pfc = NULL, *class_pause = NULL, *class_resume = NULL;
    PyObject *class_counts = NULL;
    long wire_overhead, cell_bytes, buffer_cells, xoff, xon;
    static char *kwlist[] = {"n", "seconds_per_byte", "queue_limit", "cable_peer",
                             "cable_delay", "pause_seconds", "valid_ports", "pause_frames",
                             "resume_frames", "wire_overhead", "cell_bytes", "buffer_cells",
                             "pfc_enabled", "xoff_cells", "xon_cells", "forward", "wred",
                             "random", "counts", "lateness", "wakeup", "job_by_dst",
                             "job_by_src", "job_counts", "max_depth", "queue_by_dscp",
                             "queue_by_flow", "class_limit", "class_wred", "class_pfc",
                             "class_pause_frames", "class_resume_frames", "class_counts",
                             NULL};
    if (p->queues != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Pipeline is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOOOOOOOOlllpllO!O!OOO|OO!O!OOO!O!OOOO!O!O", kwlist, &n,
                                     &spb, &qlimit, &peer, &delay, &pause_s, &valid,
                                     &pause_frames, &resume_frames, &wire_overhead, &cell_bytes,
                                     &buffer_cells, &pfc_enabled, &xoff, &xon, &PyDict_Type,
                                     &forward, &PyDict_Type, &wred, &random, &counts, &lateness,
                                     &wakeup, &PyDict_Type, &job_by_dst, &PyDict_Type,
                                     &job_by_src, &job_counts, &max_depth, &PyDict_Type,
                                     &queue_by_dscp, &PyDict_Type, &queue_by_flow,
                                     &class_limit, &class_wred, &class_pfc, &PyDict_Type,
                                     &class_pause, &PyDict_Type, &class_resume,
                                     &class_counts))
        return -1;
    if (n <= 0 || cell_bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "n and cell_bytes must be positive");
        return -1;
    }
    p->n = n;
    size_t nd = n * sizeof(double), nl = n * sizeof(long);
    p->seconds_per_byte = PyMem_Calloc(n, sizeof(double));
    p->cable_delay = PyMem_Calloc(n, sizeof(double));
    p->pause_seconds = PyMem_Calloc(n, sizeof(double));
    p->queue_limit = PyMem_Calloc(n, sizeof(long));
    p->cable_peer = PyMem_Calloc(n, sizeof(int));
    p->valid = PyMem_Calloc(n, 1);
    p->pause_frame = PyMem_Calloc(n, sizeof(PyObject *));
    p->resume_frame = PyMem_Calloc(n, sizeof(PyObject *));
    p->wred_obj = PyMem_Calloc(n, sizeof(PyObject *));
    p->wred_min = PyMem_Calloc(n, sizeof(double));
    p->wred_max = PyMem_Calloc(n, sizeof(double));
    p->wred_prob = PyMem_Calloc(n, sizeof(double));
    int nc = n * QUEUE_CLASSES;
    p->queues = PyMem_Calloc(nc, sizeof(Queue));
    p->class_limit = PyMem_Calloc(nc, sizeof(long));
    p->class_cells = PyMem_Calloc(nc, sizeof(long));
    p->ingress_class_cells = PyMem_Calloc(nc, sizeof(long));
    p->ingress_class_paused = PyMem_Calloc(nc, 1);
    p->class_pause_frame = PyMem_Calloc(nc, sizeof(PyObject *));
    p->class_resume_frame = PyMem_Calloc(nc, sizeof(PyObject *));
    p->queue_cells = PyMem_Calloc(n, sizeof(long));
    p->peak_queue_cells = PyMem_Calloc(n, sizeof(long));
    p->ingress_cells = PyMem_Calloc(n, sizeof(long));
    p->tx_free_at = PyMem_Calloc(n, sizeof(double));
    p->paused_until = PyMem_Calloc(n, sizeof(double));
    p->start_at = PyMem_Calloc(n, sizeof(double));
    p->last_reception = PyMem_Calloc(n, sizeof(double));
    p->last_arrival = PyMem_Calloc(n, sizeof(double));
    p->refresh_at = PyMem_Calloc(nc, sizeof(double));
    p->ingress_paused = PyMem_Calloc(n, 1);
    p->paused_since = PyMem_Calloc(n, sizeof(double));
    p->has_refresh = PyMem_Calloc(nc, 1);
    (void)nd;
    (void)nl;
    if (!p->seconds_per_byte || !p->cable_delay || !p->pause_seconds || !p->queue_limit ||
        !p->cable_peer || !p->valid || !p->pause_frame || !p->resume_frame || !p->queues ||
        !p->queue_cells || !p->peak_queue_cells || !p->ingress_cells || !p->tx_free_at ||
        !p->paused_until || !p->start_at || !p->last_reception || !p->last_arrival ||
        !p->refresh_at ||
        !p->ingress_paused || !p->has_refresh || !p->wred_obj || !p->wred_min ||
        !p->wred_max || !p->wred_prob || !p->class_limit || !p->class_cells ||
        !p->ingress_class_cells || !p->ingress_class_paused || !p->class_pause_frame ||
        !p->class_resume_frame || !p->paused_since) {
        PyErr_NoMemory();
        return -1;
    }
    long *peers = PyMem_Calloc(n, sizeof(long));
    if (peers == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = fill_doubles(spb, p->seconds_per_byte, n, "seconds_per_byte");
    if (rc == 0) rc = fill_longs(qlimit, p->queue_limit, n, "queue_limit");
    if (rc == 0) rc = fill_longs(peer, peers, n, "cable_peer");
    if (rc == 0) rc = fill_doubles(delay, p->cable_delay, n, "cable_delay");
    if (rc == 0) rc = fill_doubles(pause_s, p->pause_seconds, n, "pause_seconds");
    for (int i = 0; rc == 0 && i < n; i++) {
        if (peers[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "cable_peer out of range");
            rc = -1;
        }
        p->cable_peer[i] = (int)peers[i];
    }
    PyMem_Free(peers);
    if (rc < 0) return -1;
    PyObject *iter = PyObject_GetIter(valid);
    if (iter == NULL) return -1;
    PyObject *item;
    while ((item = PyIter_Next(iter)) != NULL) {
        long port = PyLong_AsLong(item);
        Py_DECREF(item);
        if (port < 0 || port >= n) {
            Py_DECREF(iter);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "valid port out of range");
            return -1;
        }
        p->valid[port] = 1;
    }
    Py_DECREF(iter);
    if (PyErr_Occurred()) return -1;
    PyObject *maps[2] = {pause_frames, resume_frames};
    PyObject **targets[2] = {p->pause_frame, p->resume_frame};
    for (int m = 0; m < 2; m++) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        if (!PyDict_Check(maps[m])) {
            PyErr_SetString(PyExc_TypeError, "pause frames: a dict {port: bytes} expected");
            return -1;
        }
        while (PyDict_Next(maps[m], &pos, &key, &value)) {
            long port = PyLong_AsLong(key);
            if (port < 0 || port >= n || !PyBytes_Check(value)) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad pause frame entry");
                return -1;
            }
            Py_INCREF(value);
            Py_XSETREF(targets[m][port], value);
        }
    }
    for (int i = 0; i < n; i++) {
        p->start_at[i] = NEVER;
        p->last_reception[i] = -NEVER;
        p->last_arrival[i] = -NEVER;
    }
    /* Queue classes: by default each class has the port's limit, WRED and PFC. */
    if (class_limit != NULL && class_limit != Py_None) {
        if (fill_longs(class_limit, p->class_limit, nc, "class_limit") < 0) return -1;
    } else {
        for (int i = 0; i < nc; i++) p->class_limit[i] = p->queue_limit[i / QUEUE_CLASSES];
    }
    for (int c = 0; c < QUEUE_CLASSES; c++) {
        p->cpfc_enabled[c] = pfc_enabled;
        p->cxoff[c] = xoff;
        p->cxon[c] = xon;
    }
    if (class_pfc != NULL && class_pfc != Py_None) {
        PyObject *fast = PySequence_Fast(class_pfc, "class_pfc");
        if (fast == NULL) return -1;
        if (PySequence_Fast_GET_SIZE(fast) != QUEUE_CLASSES) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "class_pfc: 8 (enabled, xoff, xon) expected");
            return -1;
        }
        for (int c = 0; c < QUEUE_CLASSES; c++) {
            int enabled;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, c), "pll", &enabled,
                                  &p->cxoff[c], &p->cxon[c])) {
                Py_DECREF(fast);
                return -1;
            }
            p->cpfc_enabled[c] = enabled;
        }
        Py_DECREF(fast);
    }
    if (class_wred != NULL && class_wred != Py_None) {
        PyObject *fast = PySequence_Fast(class_wred, "class_wred");
        if (fast == NULL) return -1;
        if (PySequence_Fast_GET_SIZE(fast) != QUEUE_CLASSES) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "class_wred: 8 profiles or None expected");
            return -1;
        }
        for (int c = 0; c < QUEUE_CLASSES; c++) {
            PyObject *profile = PySequence_Fast_GET_ITEM(fast, c);
            if (profile == Py_None) continue;
            if (wred_field(profile, "min_cells", &p->cw_min[c]) < 0 ||
                wred_field(profile, "max_cells", &p->cw_max[c]) < 0 ||
                wred_field(profile, "max_prob_percent", &p->cw_prob[c]) < 0) {
                Py_DECREF(fast);
                return -1;
            }
            p->cw_set[c] = 1;
        }
        Py_DECREF(fast);
    }
    for (int key = 0; key < nc; key++) { /* by default the port's pause frames */
        Py_XINCREF(p->pause_frame[key / QUEUE_CLASSES]);
        p->class_pause_frame[key] = p->pause_frame[key / QUEUE_CLASSES];
        Py_XINCREF(p->resume_frame[key / QUEUE_CLASSES]);
        p->class_resume_frame[key] = p->resume_frame[key / QUEUE_CLASSES];
    }
    PyObject *class_maps[2] = {class_pause, class_resume};
    PyObject **class_targets[2] = {p->class_pause_frame, p->class_resume_frame};
    for (int m = 0; m < 2; m++) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        if (class_maps[m] == NULL) continue;
        while (PyDict_Next(class_maps[m], &pos, &key, &value)) {
            long k = PyLong_AsLong(key);
            if (k < 0 || k >= nc || !PyBytes_Check(value)) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad class pause frame");
                return -1;
            }
            Py_INCREF(value);
            Py_XSETREF(class_targets[m][k], value);
        }
    }
    Py_XINCREF(queue_by_dscp);
    p->queue_by_dscp = queue_by_dscp;
    Py_XINCREF(queue_by_flow);
    p->queue_by_flow = queue_by_flow;
    p->wire_overhead = wire_overhead;
    p->cell_bytes = cell_bytes;
    p->buffer_cells = buffer_cells;
    p->pfc_enabled = pfc_enabled;
    p->xoff_cells = xoff;
    p->xon_cells = xon;
    p->now = -NEVER;
    p->limit = -NEVER;
    Py_INCREF(forward);
    p->forward = forward;
    Py_INCREF(wred);
    p->wred = wred;
    Py_INCREF(random);
    p->random = random;
    if (get_int64_buffer(counts, &p->counts_view, (Py_ssize_t)N_ROWS * n, "counts") < 0)
        return -1;
    Py_INCREF(counts);
    p->counts_obj = counts;
    p->counts = p->counts_view.buf;
    Py_XINCREF(job_by_dst);
    p->job_by_dst = job_by_dst;
    Py_XINCREF(job_by_src);
    p->job_by_src = job_by_src;
    /* Without arrays of the caller's, counts of our own (nobody reads them). */
    PyObject *own[2] = {job_counts, max_depth};
    Py_ssize_t items[2] = {(Py_ssize_t)J_ROWS * n * JOB_CLASSES, n};
    for (int i = 0; i < 2; i++) {
        if (own[i] != NULL && own[i] != Py_None) {
            Py_INCREF(own[i]);
        } else {
            own[i] = PyByteArray_FromStringAndSize(NULL, items[i] * 8);
            if (own[i] == NULL) return -1;
            memset(PyByteArray_AS_STRING(own[i]), 0, items[i] * 8);
        }
    }
    p->job_obj = own[0];
    p->depth_obj = own[1];
    if (PyObject_GetBuffer(own[0], &p->job_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0 ||
        p->job_view.len != items[0] * 8) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "job_counts: wrong size");
        return -1;
    }
    if (PyObject_GetBuffer(own[1], &p->depth_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0 ||
        p->depth_view.len != items[1] * 8) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "max_depth: wrong size");
        return -1;
    }
    p->job_counts = p->job_view.buf;
    p->max_depth = p->depth_view.buf;
    Py_ssize_t class_items = (Py_ssize_t)C_ROWS * n * QUEUE_CLASSES;
    if (class_counts != NULL && class_counts != Py_None) {
        Py_INCREF(class_counts);
    } else {
        class_counts = PyByteArray_FromStringAndSize(NULL, class_items * 8);
        if (class_counts == NULL) return -1;
        memset(PyByteArray_AS_STRING(class_counts), 0, class_items * 8);
    }
    p->class_obj = class_counts;
    if (PyObject_GetBuffer(class_counts, &p->class_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0 ||
        p->class_view.len != class_items * 8) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "class_counts: wrong size");
        return -1;
    }
    p->class_counts = p->class_view.buf;
    if (PyObject_GetBuffer(lateness, &p->late_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (p->late_view.itemsize != 8 || p->late_view.len < 8) {
        PyBuffer_Release(&p->late_view);
        PyErr_SetString(PyExc_ValueError, "lateness: a non-empty int64 array expected");
        return -1;
    }
    Py_INCREF(lateness);
    p->late_obj = lateness;
    p->late = p->late_view.buf;
    p->late_buckets = p->late_view.len / 8;
    if (wakeup != NULL && wakeup != Py_None) {
        if (PyObject_GetBuffer(wakeup, &p->wakeup_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            return -1;
        if (p->wakeup_view.itemsize != 8 || p->wakeup_view.len < 8) {
            PyBuffer_Release(&p->wakeup_view);
            PyErr_SetString(PyExc_ValueError, "wakeup: a non-empty int64 array expected");
            return -1;
        }
        Py_INCREF(wakeup);
        p->wakeup_obj = wakeup;
        p->wakeup = p->wakeup_view.buf;
        p->wakeup_buckets = p->wakeup_view.len / 8;
    }
    p->transmitted = PyList_New(0);
    p->transmitted_due = PyList_New(0);
    p->control = PyList_New(0);
    if (!p->transmitted || !p->transmitted_due || !p->control) return -1;
    return 0;
}

static int port_arg(Pipeline *p, int port) {
    if (port < 0 || port >= p->n) {
        PyErr_Format(PyExc_ValueError, "port %d out of range", port);
        return -1;
    }
    return 0;
}

static PyObject *py_receive(Pipeline *p, PyObject *args) {
    int port;
    PyObject *frame;
    double stamp;
    if (!PyArg_ParseTuple(args, "iO!d", &port, &PyBytes_Type, &frame, &stamp)) return NULL;
    if (port_arg(p, port) < 0 || tm_receive(p, port, frame, stamp) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_ingress(Pipeline *p, PyObject *args) {
    int port;
    PyObject *frame;
    double now;
    if (!PyArg_ParseTuple(args, "iO!d", &port, &PyBytes_Type, &frame, &now)) return NULL;
    if (port_arg(p, port) < 0 || ingress(p, port, frame, now) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_advance(Pipeline *p, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    if (tm_advance(p, now) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_next_event_time(Pipeline *p, PyObject *Py_UNUSED(ignored)) {
    while (p->heap_len) {
        Event *e = &p->heap[0];
        int stale = (e->kind == START && p->start_at[e->port] != e->when) ||
                    (e->kind == REFRESH &&
                     !(p->has_refresh[e->port] && p->refresh_at[e->port] == e->when));
        if (!stale) return PyFloat_FromDouble(e->when);
        Event gone = heap_pop(p);
        Py_XDECREF(gone.frame);
    }
    Py_RETURN_NONE;
}

static double monotonic_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static Py_ssize_t read_slots(Pipeline *p, int port, unsigned char *memory, Py_ssize_t *next,
                             Py_ssize_t slots, Py_ssize_t slot_bytes, Py_ssize_t limit,
                             int stamped, double offset, double read_time, double *last_stamp,
                             Py_ssize_t *fallbacks, Py_ssize_t *truncated, int *failed);
static Py_ssize_t send_frames(Pipeline *p, PyObject *frames, const int *fds);
static void note_lateness(Pipeline *p, double now);

/* add_ring(port, ring, slots, slot_bytes): a PACKET_MMAP ring run() reads (the
 * mapping is held until release_rings()). */
static PyObject *py_add_ring(Pipeline *p, PyObject *args) {
    int port;
    PyObject *ring;
    Py_ssize_t slots, slot_bytes, next;
    if (!PyArg_ParseTuple(args, "iOnnn", &port, &ring, &slots, &slot_bytes, &next)) return NULL;
    if (port_arg(p, port) < 0) return NULL;
    struct Ring *grown = PyMem_Realloc(p->rings, (p->n_rings + 1) * sizeof(struct Ring));
    if (grown == NULL) return PyErr_NoMemory();
    p->rings = grown;
    struct Ring *r = &p->rings[p->n_rings];
    if (PyObject_GetBuffer(ring, &r->view, PyBUF_WRITABLE) < 0) return NULL;
    if (slots <= 0 || slot_bytes < 32 || slots * slot_bytes > r->view.len || next < 0 ||
        next >= slots) {
        PyBuffer_Release(&r->view);
        PyErr_SetString(PyExc_ValueError, "ring geometry does not fit the mapping");
        return NULL;
    }
    r->port = port;
    r->slots = slots;
    r->slot_bytes = slot_bytes;
    r->next = next;
    p->n_rings++;
    Py_RETURN_NONE;
}

static PyObject *py_release_rings(Pipeline *p, PyObject *Py_UNUSED(ignored)) {
    for (int i = 0; i < p->n_rings; i++) PyBuffer_Release(&p->rings[i].view);
    p->n_rings = 0;
    Py_RETURN_NONE;
}

/* One sample into the ring: cumulative counts per (sampled port, class), then the deepest
 * queue per port since the previous sample (which this resets: the register's reader).
 * The slot's stamp is 0 while it is written, its number + 1 after, so a reader that
 * copies it meanwhile sees the change and counts the sample as lost. */
static void take_sample(Pipeline *p, double loop_time, double wall_time) {
    int64_t *header = p->ring;
    int64_t number = header[0];
    int64_t *slot = p->ring + RING_HEADER_WORDS + p->ring_n_ports +
                    (number % p->ring_slots) * p->ring_slot_words;
    __atomic_store_n(&slot[0], 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    slot[1] = (int64_t)llround(loop_time * 1e9);
    slot[2] = (int64_t)llround(wall_time * 1e9);
    slot[3] = 0;
    Py_ssize_t cells = p->ring_n_ports * JOB_CLASSES;
    int64_t *values = slot + SLOT_HEAD_WORDS;
    static const int rows[SAMPLE_VALUES] = {J_TX_PACKETS, J_TX_BYTES, J_MARKED_PACKETS};
    for (int v = 0; v < SAMPLE_VALUES; v++) {
        for (Py_ssize_t i = 0; i < p->ring_n_ports; i++) {
            memcpy(values + v * cells + i * JOB_CLASSES,
                   &JOB_COUNT(p, rows[v], (Py_ssize_t)p->ring_ports[i] * JOB_CLASSES),
                   JOB_CLASSES * sizeof(int64_t));
        }
    }
    int64_t *depths = values + SAMPLE_VALUES * cells;
    for (Py_ssize_t i = 0; i < p->ring_n_ports; i++) {
        depths[i] = p->max_depth[p->ring_ports[i]];
        p->max_depth[p->ring_ports[i]] = 0;
    }
    __atomic_store_n(&slot[0], number + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&header[0], number + 1, __ATOMIC_RELEASE);
}

/* set_sampler(ring, ports, slots, interval, first_due): the ring (int64 words, laid out
 * by sample_ring.SampleRing) run() samples into every `interval` s from `first_due` on;
 * interval 0 (or a ring of None) stops sampling. */
static PyObject *py_set_sampler(Pipeline *p, PyObject *args) {
    PyObject *ring, *ports;
    Py_ssize_t slots;
    double interval, first_due;
    if (!PyArg_ParseTuple(args, "OOndd", &ring, &ports, &slots, &interval, &first_due))
        return NULL;
    if (p->ring_obj != NULL) {
        PyBuffer_Release(&p->ring_view);
        Py_CLEAR(p->ring_obj);
    }
    PyMem_Free(p->ring_ports);
    p->ring_ports = NULL;
    p->ring = NULL;
    p->sample_interval = 0.0;
    if (ring == Py_None || interval <= 0.0) Py_RETURN_NONE;
    PyObject *fast = PySequence_Fast(ports, "ports: a sequence of ports");
    if (fast == NULL) return NULL;
    Py_ssize_t n_ports = PySequence_Fast_GET_SIZE(fast);
    p->ring_ports = PyMem_Calloc(n_ports ? n_ports : 1, sizeof(int));
    if (p->ring_ports == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n_ports; i++) {
        long port = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (port < 0 || port >= p->n) {
            Py_DECREF(fast);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "sampled port out of range");
            return NULL;
        }
        p->ring_ports[i] = (int)port;
    }
    Py_DECREF(fast);
    Py_ssize_t slot_words = SLOT_HEAD_WORDS + n_ports * (JOB_CLASSES * SAMPLE_VALUES + 1);
    if (get_int64_buffer(ring, &p->ring_view, RING_HEADER_WORDS + n_ports + slots * slot_words,
                         "ring") < 0)
        return NULL;
    Py_INCREF(ring);
    p->ring_obj = ring;
    p->ring = p->ring_view.buf;
    p->ring_n_ports = n_ports;
    p->ring_slots = slots;
    p->ring_slot_words = slot_words;
    p->sample_interval = interval;
    p->next_sample = first_due;
    Py_RETURN_NONE;
}

/* sample(loop_time, wall_time): one sample now (the Python loop's; run() samples itself). */
static PyObject *py_sample(Pipeline *p, PyObject *args) {
    double loop_time, wall_time;
    if (!PyArg_ParseTuple(args, "dd", &loop_time, &wall_time)) return NULL;
    if (p->ring == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no sample ring (set_sampler first)");
        return NULL;
    }
    take_sample(p, loop_time, wall_time);
    Py_RETURN_NONE;
}

static double realtime_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define RUN_BATCH 64

/* run(poll_fds, send_fds, offset, until, busy_until, granularity) -> (woken, active)
 * The packet loop between two looks by Python: read every registered ring (up
 * to RUN_BATCH frames each), advance to the horizon, send what finished, and
 * sleep (ppoll, nanosecond timeout) until the next event or a readable fd;
 * returns at `until` (at `busy_until` once it has done something), on a signal,
 * or when an fd that is not a ring's is
 * readable (woken: Python must look at it). active: anything was done. */
static PyObject *py_run(Pipeline *p, PyObject *args) {
    PyObject *poll_seq, *send_seq, *offset_obj;
    double until, busy_until, granularity = 0.0;
    if (!PyArg_ParseTuple(args, "OOOdd|d", &poll_seq, &send_seq, &offset_obj, &until,
                          &busy_until, &granularity))
        return NULL;
    double last_wake = -NEVER;
    int stamped = offset_obj != Py_None;
    double offset = stamped ? PyFloat_AsDouble(offset_obj) : 0.0;
    if (offset == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *pf = PySequence_Fast(poll_seq, "poll_fds: a sequence of fds");
    if (pf == NULL) return NULL;
    Py_ssize_t n_poll = PySequence_Fast_GET_SIZE(pf);
    struct pollfd *pfds = PyMem_Calloc(n_poll ? n_poll : 1, sizeof(struct pollfd));
    int *fds = PyMem_Malloc(p->n * sizeof(int));
    if (pfds == NULL || fds == NULL) {
        Py_DECREF(pf);
        PyMem_Free(pfds);
        PyMem_Free(fds);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n_poll; i++) {
        pfds[i].fd = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(pf, i));
        pfds[i].events = POLLIN;
    }
    Py_DECREF(pf);
    PyObject *sf = PySequence_Fast(send_seq, "send_fds: one fd per port");
    if (sf == NULL || PySequence_Fast_GET_SIZE(sf) != p->n) {
        Py_XDECREF(sf);
        PyMem_Free(pfds);
        PyMem_Free(fds);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "send_fds: one entry per port");
        return NULL;
    }
    for (int i = 0; i < p->n; i++) fds[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(sf, i));
    Py_DECREF(sf);
    if (PyErr_Occurred()) {
        PyMem_Free(pfds);
        PyMem_Free(fds);
        return NULL;
    }
    int woken = 0, active = 0, failed = 0;
    while (!failed) {
        /* `now` before reading: every frame received before it is in a ring now. */
        double now = monotonic_now(), horizon = now;
        if (p->sample_interval > 0.0 && now >= p->next_sample) {
            /* (our choice) on the grid from the first sample; a loop that missed a
             * whole interval samples once and goes on from now */
            take_sample(p, now, realtime_now());
            p->next_sample += p->sample_interval;
            if (p->next_sample <= now) p->next_sample = now + p->sample_interval;
        }
        if (active && now >= busy_until) break; /* counters to flush */
        Py_ssize_t got = 0;
        for (int i = 0; i < p->n_rings && !failed; i++) {
            struct Ring *r = &p->rings[i];
            double last = now;
            Py_ssize_t n = read_slots(p, r->port, r->view.buf, &r->next, r->slots, r->slot_bytes,
                                      RUN_BATCH, stamped, offset, now, &last,
                                      &p->stamp_fallbacks, &p->truncated, &failed);
            got += n;
            if (n == RUN_BATCH && last < horizon) horizon = last; /* more wait in this ring */
        }
        if (failed) break;
        int ran = tm_advance(p, horizon);
        if (ran < 0) {
            failed = 1;
            break;
        }
        if (ran) active = 1; /* counters changed: Python flushes them when run() returns */
        if (PyList_GET_SIZE(p->transmitted) || PyList_GET_SIZE(p->control)) {
            double sent_at = monotonic_now();
            note_lateness(p, sent_at);
            send_frames(p, p->transmitted, fds);
            send_frames(p, p->control, fds);
            if (PyList_SetSlice(p->transmitted, 0, PY_SSIZE_T_MAX, NULL) < 0 ||
                PyList_SetSlice(p->transmitted_due, 0, PY_SSIZE_T_MAX, NULL) < 0 ||
                PyList_SetSlice(p->control, 0, PY_SSIZE_T_MAX, NULL) < 0) {
                failed = 1;
                break;
            }
            active = 1;
        }
        if (got) {
            active = 1;
            continue;
        }
        /* Nothing read: sleep to the next event (stale ones dropped) or `until`. */
        double next = NEVER;
        while (p->heap_len) {
            Event *e = &p->heap[0];
            int stale = (e->kind == START && p->start_at[e->port] != e->when) ||
                        (e->kind == REFRESH &&
                         !(p->has_refresh[e->port] && p->refresh_at[e->port] == e->when));
            if (!stale) {
                next = e->when;
                break;
            }
            Event gone = heap_pop(p);
            Py_XDECREF(gone.frame);
        }
        double deadline = next < until ? next : until;
        if (active && busy_until < deadline) deadline = busy_until;
        int sample_due = p->sample_interval > 0.0 && p->next_sample < deadline;
        if (sample_due) deadline = p->next_sample;
        /* At most one timed wake-up per `granularity`: departures due closer together
         * than that are handed over together (each one's lateness is counted). */
        if (deadline == next && next < last_wake + granularity) {
            deadline = last_wake + granularity;
            if (deadline > until) deadline = until;
        }
        now = monotonic_now();
        if (deadline <= now) {
            if (next <= now || sample_due) continue; /* due already */
            if (now >= until || (active && now >= busy_until)) break;
            continue;
        }
        /* Arrivals wake the loop at most once per `granularity` too: within that of the
         * last wake-up only the other fds are watched. A frame keeps its kernel stamp,
         * so reading it later moves no time in the traffic manager; a departure that
         * falls due meanwhile leaves late, and the lateness figures count it. */
        int rings_watched = now >= last_wake + granularity;
        double ring_check = last_wake + granularity, sleep_to = deadline;
        if (!rings_watched && ring_check < sleep_to) sleep_to = ring_check;
        double wait = sleep_to - now;
        struct timespec timeout = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        struct pollfd *watch = rings_watched ? pfds : pfds + p->n_rings;
        nfds_t n_watch = (nfds_t)(rings_watched ? n_poll : n_poll - p->n_rings);
        int ready;
        Py_BEGIN_ALLOW_THREADS
        ready = ppoll(watch, n_watch, &timeout, NULL);
        Py_END_ALLOW_THREADS
        if (ready < 0) break; /* EINTR: a signal for Python */
        double woke_at = monotonic_now();
        if (ready > 0 || sleep_to == deadline) last_wake = woke_at;
        if (ready == 0 && sleep_to < deadline) continue; /* time to look at the rings */
        if (ready == 0) {
            if (next <= deadline && next < until) { /* slept to an event: how late? */
                double late = woke_at - next;
                if (late > p->wakeup_max) p->wakeup_max = late;
                uint64_t us = late > 0 ? (uint64_t)(late * 1e6) : 0;
                Py_ssize_t bucket = us ? 64 - __builtin_clzll(us) : 0;
                if (bucket >= p->wakeup_buckets) bucket = p->wakeup_buckets - 1;
                if (p->wakeup != NULL) p->wakeup[bucket]++;
                continue;
            }
            if (sample_due) continue; /* slept to the next sample */
            break; /* until */
        }
        int ring_only = 1;
        for (nfds_t i = 0; i < n_watch; i++) {
            if (!watch[i].revents) continue;
            /* the rings' fds come first, in add_ring order */
            if (!rings_watched || (Py_ssize_t)i >= p->n_rings) ring_only = 0;
            /* A ring's socket in trouble (its interface gone): reading the ring clears
             * nothing, so ppoll would report it at once for ever. Python looks at it. */
            if (watch[i].revents & (POLLERR | POLLHUP | POLLNVAL)) ring_only = 0;
        }
        if (!ring_only) {
            woken = 1;
            break;
        }
    }
    PyMem_Free(pfds);
    PyMem_Free(fds);
    if (failed) return NULL;
    return Py_BuildValue("(ii)", woken, active);
}

/* read_ring(port, ring, next_slot, slots, slot_bytes, limit, offset, read_time)
 *   -> (next_slot, frames, fallbacks, last_stamp, truncated)
 * Up to `limit` frames out of a TPACKET_V2 ring (ports.RxRing), each received
 * at its kernel stamp minus `offset` (or at read_time when the stamp is more
 * than 1 s old or 1 ms ahead), VLAN tag put back; offset None: at read_time. */
static Py_ssize_t read_slots(Pipeline *p, int port, unsigned char *memory, Py_ssize_t *next,
                             Py_ssize_t slots, Py_ssize_t slot_bytes, Py_ssize_t limit,
                             int stamped, double offset, double read_time, double *last_stamp,
                             Py_ssize_t *fallbacks, Py_ssize_t *truncated, int *failed) {
    double earliest = read_time - 1.0, latest = read_time + 1e-3, stamp = read_time;
    Py_ssize_t count = 0, index = *next;
    for (; count < limit; count++) {
        unsigned char *slot = memory + index * slot_bytes;
        uint32_t status = __atomic_load_n((uint32_t *)slot, __ATOMIC_ACQUIRE);
        if (!(status & 1)) break;
        uint32_t length, snaplen, seconds, nanoseconds;
        uint16_t mac, tci, tpid;
        memcpy(&length, slot + 4, 4);
        memcpy(&snaplen, slot + 8, 4);
        memcpy(&mac, slot + 12, 2);
        memcpy(&seconds, slot + 16, 4); /* tpacket2_hdr: tp_net at 14 */
        memcpy(&nanoseconds, slot + 20, 4);
        memcpy(&tci, slot + 24, 2);
        memcpy(&tpid, slot + 26, 2);
        if ((Py_ssize_t)mac + snaplen > slot_bytes) snaplen = slot_bytes > mac ? slot_bytes - mac : 0;
        PyObject *frame;
        if ((status & (1 << 4)) && snaplen >= 12) {
            if (!(status & (1 << 6))) tpid = 0x8100;
            frame = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)snaplen + 4);
            if (frame != NULL) {
                unsigned char *out = (unsigned char *)PyBytes_AS_STRING(frame);
                memcpy(out, slot + mac, 12);
                out[12] = tpid >> 8;
                out[13] = tpid & 0xFF;
                out[14] = tci >> 8;
                out[15] = tci & 0xFF;
                memcpy(out + 16, slot + mac + 12, snaplen - 12);
            }
        } else {
            frame = PyBytes_FromStringAndSize((const char *)slot + mac, snaplen);
        }
        if (frame == NULL) {
            *failed = 1;
            break;
        }
        if (snaplen != length) (*truncated)++;
        if (stamped) {
            stamp = (seconds + nanoseconds * 1e-9) - offset;
            if (!(earliest < stamp && stamp < latest)) {
                stamp = read_time;
                (*fallbacks)++;
            }
        }
        int rc = tm_receive(p, port, frame, stamp);
        Py_DECREF(frame);
        __atomic_store_n((uint32_t *)slot, 0, __ATOMIC_RELEASE); /* back to the kernel */
        if (++index == slots) index = 0;
        if (rc < 0) {
            *failed = 1;
            count++;
            break;
        }
    }
    *next = index;
    *last_stamp = stamp;
    return count;
}

static PyObject *py_read_ring(Pipeline *p, PyObject *args) {
    int port;
    PyObject *ring, *offset_obj;
    Py_ssize_t index, slots, slot_bytes, limit;
    double read_time;
    if (!PyArg_ParseTuple(args, "iOnnnnOd", &port, &ring, &index, &slots, &slot_bytes, &limit,
                          &offset_obj, &read_time))
        return NULL;
    if (port_arg(p, port) < 0) return NULL;
    int stamped = offset_obj != Py_None;
    double offset = stamped ? PyFloat_AsDouble(offset_obj) : 0.0;
    if (offset == -1.0 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(ring, &view, PyBUF_WRITABLE) < 0) return NULL;
    if (slots <= 0 || slot_bytes < 32 || slots * slot_bytes > view.len || index < 0 ||
        index >= slots) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "ring geometry does not fit the mapping");
        return NULL;
    }
    double stamp = read_time;
    Py_ssize_t fallbacks = 0, truncated = 0;
    int failed = 0;
    Py_ssize_t count = read_slots(p, port, view.buf, &index, slots, slot_bytes, limit, stamped,
                                  offset, read_time, &stamp, &fallbacks, &truncated, &failed);
    PyBuffer_Release(&view);
    if (failed) return NULL;
    return Py_BuildValue("(nnndn)", index, count, fallbacks, stamp, truncated);
}

#define SEND_BATCH 64

/* Sends every (port, frame) of `frames` on fds[port] (a sequence indexed by port,
 * -1 for none), consecutive frames to one port in one sendmmsg; a refused frame
 * counts as a send error of its port. Returns the number sent. */
static Py_ssize_t send_frames(Pipeline *p, PyObject *frames, const int *fds) {
    Py_ssize_t total = PyList_GET_SIZE(frames), i = 0, sent = 0;
    struct mmsghdr messages[SEND_BATCH];
    struct iovec vectors[SEND_BATCH];
    while (i < total) {
        PyObject *pair = PyList_GET_ITEM(frames, i);
        int port = (int)PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
        int fd = (port >= 0 && port < p->n) ? fds[port] : -1;
        int m = 0;
        while (i + m < total && m < SEND_BATCH) {
            PyObject *next = PyList_GET_ITEM(frames, i + m);
            if (PyLong_AsLong(PyTuple_GET_ITEM(next, 0)) != port) break;
            PyObject *frame = PyTuple_GET_ITEM(next, 1);
            vectors[m].iov_base = PyBytes_AS_STRING(frame);
            vectors[m].iov_len = PyBytes_GET_SIZE(frame);
            memset(&messages[m], 0, sizeof(messages[m]));
            messages[m].msg_hdr.msg_iov = &vectors[m];
            messages[m].msg_hdr.msg_iovlen = 1;
            m++;
        }
        if (fd < 0) {
            if (port >= 0 && port < p->n) COUNT(p, R_SEND_ERRORS, port) += m;
            i += m;
            continue;
        }
        int done = 0;
        while (done < m) {
            int k = sendmmsg(fd, messages + done, m - done, MSG_DONTWAIT);
            if (k < 0) {
                if (errno == EINTR) continue;
                COUNT(p, R_SEND_ERRORS, port)++; /* buffer full or interface down */
                done++;
            } else {
                done += k;
                sent += k;
            }
        }
        i += m;
    }
    PyErr_Clear();
    return sent;
}

/* The frames of `transmitted` leave at `now`: their lateness into the histogram. */
static void note_lateness(Pipeline *p, double now) {
    Py_ssize_t due_count = PyList_GET_SIZE(p->transmitted_due);
    for (Py_ssize_t i = 0; i < due_count; i++) {
        double late = now - PyFloat_AS_DOUBLE(PyList_GET_ITEM(p->transmitted_due, i));
        if (late > p->late_max) p->late_max = late;
        uint64_t us = late > 0 ? (uint64_t)(late * 1e6) : 0;
        Py_ssize_t bucket = us ? 64 - __builtin_clzll(us) : 0;
        if (bucket >= p->late_buckets) bucket = p->late_buckets - 1;
        p->late[bucket]++;
    }
}

/* send(fds, now) -> frames sent: the finished frames, then PFC frames, out of the
 * lists (which are emptied); the departure lateness (now - due) of every finished
 * frame goes into the lateness histogram (bucket 0: < 1 us, bucket b: [2^(b-1),
 * 2^b) us, the last one open-ended). */
static PyObject *py_send(Pipeline *p, PyObject *args) {
    PyObject *fd_seq;
    double now;
    if (!PyArg_ParseTuple(args, "Od", &fd_seq, &now)) return NULL;
    int *fds = PyMem_Malloc(p->n * sizeof(int));
    if (fds == NULL) return PyErr_NoMemory();
    PyObject *fast = PySequence_Fast(fd_seq, "fds: a sequence indexed by port");
    if (fast == NULL || PySequence_Fast_GET_SIZE(fast) != p->n) {
        Py_XDECREF(fast);
        PyMem_Free(fds);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fds: one entry per port");
        return NULL;
    }
    for (int i = 0; i < p->n; i++) fds[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    note_lateness(p, now);
    Py_ssize_t sent = send_frames(p, p->transmitted, fds);
    sent += send_frames(p, p->control, fds);
    PyMem_Free(fds);
    if (PyList_SetSlice(p->transmitted, 0, PY_SSIZE_T_MAX, NULL) < 0 ||
        PyList_SetSlice(p->transmitted_due, 0, PY_SSIZE_T_MAX, NULL) < 0 ||
        PyList_SetSlice(p->control, 0, PY_SSIZE_T_MAX, NULL) < 0)
        return NULL;
    return PyLong_FromSsize_t(sent);
}

static PyObject *py_queue_cells(Pipeline *p, PyObject *arg) {
    long port = PyLong_AsLong(arg);
    if (port == -1 && PyErr_Occurred()) return NULL;
    if (port_arg(p, (int)port) < 0) return NULL;
    return Py_BuildValue("(ll)", p->queue_cells[port], p->peak_queue_cells[port]);
}

static PyObject *get_now(Pipeline *p, void *Py_UNUSED(c)) { return PyFloat_FromDouble(p->now); }
static PyObject *get_buffered(Pipeline *p, void *Py_UNUSED(c)) {
    return PyLong_FromLong(p->buffered_cells);
}
static PyObject *get_late_max(Pipeline *p, void *Py_UNUSED(c)) {
    return PyFloat_FromDouble(p->late_max);
}
static PyObject *get_wakeup_max(Pipeline *p, void *Py_UNUSED(c)) {
    return PyFloat_FromDouble(p->wakeup_max);
}
static PyObject *get_fallbacks(Pipeline *p, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(p->stamp_fallbacks);
}
static PyObject *get_truncated(Pipeline *p, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(p->truncated);
}
static PyObject *get_list(PyObject *list) {
    Py_INCREF(list);
    return list;
}
static PyObject *get_transmitted(Pipeline *p, void *Py_UNUSED(c)) { return get_list(p->transmitted); }
static PyObject *get_transmitted_due(Pipeline *p, void *Py_UNUSED(c)) {
    return get_list(p->transmitted_due);
}
static PyObject *get_control(Pipeline *p, void *Py_UNUSED(c)) { return get_list(p->control); }

static PyMethodDef pipeline_methods[] = {
    {"receive", (PyCFunction)py_receive, METH_VARARGS,
     "receive(port, frame, stamp): a host began sending `frame` at `stamp`."},
    {"ingress", (PyCFunction)py_ingress, METH_VARARGS,
     "ingress(port, frame, now): a frame fully received now, through the pipeline."},
    {"advance", (PyCFunction)py_advance, METH_O, "advance(now): run every event due by now."},
    {"next_event_time", (PyCFunction)py_next_event_time, METH_NOARGS,
     "Earliest time advance() has something to do; None when idle."},
    {"read_ring", (PyCFunction)py_read_ring, METH_VARARGS,
     "Frames out of a PACKET_MMAP ring into the traffic manager."},
    {"send", (PyCFunction)py_send, METH_VARARGS, "send(fds, now): hand finished frames over."},
    {"add_ring", (PyCFunction)py_add_ring, METH_VARARGS,
     "add_ring(port, ring, slots, slot_bytes, next_slot): a ring for run() to read."},
    {"release_rings", (PyCFunction)py_release_rings, METH_NOARGS,
     "Let go of the rings' mappings (before they close)."},
    {"run", (PyCFunction)py_run, METH_VARARGS,
     "run(poll_fds, send_fds, offset, until) -> (woken, active): the loop until `until`."},
    {"set_sampler", (PyCFunction)py_set_sampler, METH_VARARGS,
     "set_sampler(ring, ports, slots, interval, first_due): sample into the ring in run()."},
    {"sample", (PyCFunction)py_sample, METH_VARARGS,
     "sample(loop_time, wall_time): one sample into the ring now."},
    {"queue_cells", (PyCFunction)py_queue_cells, METH_O,
     "(depth, peak depth) of a port's queue in cells."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pipeline_getset[] = {
    {"now", (getter)get_now, NULL, "virtual time of the latest event run", NULL},
    {"buffered_cells", (getter)get_buffered, NULL, "cells in all queues", NULL},
    {"late_max", (getter)get_late_max, NULL, "largest departure lateness sent (s)", NULL},
    {"wakeup_max", (getter)get_wakeup_max, NULL, "largest wake-up lateness in run() (s)", NULL},
    {"stamp_fallbacks", (getter)get_fallbacks, NULL, "run(): frames stamped at read time", NULL},
    {"truncated", (getter)get_truncated, NULL, "run(): frames longer than their slot", NULL},
    {"transmitted", (getter)get_transmitted, NULL, "(port, frame) finished toward hosts", NULL},
    {"transmitted_due", (getter)get_transmitted_due, NULL, "their departure times", NULL},
    {"control", (getter)get_control, NULL, "(port, PFC frame) to send to hosts", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PipelineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emulation.softswitch._fastpath.Pipeline",
    .tp_basicsize = sizeof(Pipeline),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The compiled switch program and traffic manager (see fast_pipeline.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)pipeline_init,
    .tp_dealloc = (destructor)pipeline_dealloc,
    .tp_methods = pipeline_methods,
    .tp_getset = pipeline_getset,
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT, "_fastpath", "The software target's compiled packet path.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&PipelineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL) return NULL;
    PyObject *names = PyTuple_New(N_ROWS);
    if (names == NULL) goto fail;
    for (int i = 0; i < N_ROWS; i++) {
        PyObject *name = PyUnicode_FromString(ROW_NAMES[i]);
        if (name == NULL) {
            Py_DECREF(names);
            goto fail;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (PyModule_AddObject(m, "ROW_NAMES", names) < 0) {
        Py_DECREF(names);
        goto fail;
    }
    Py_INCREF(&PipelineType);
    if (PyModule_AddObject(m, "Pipeline", (PyObject *)&PipelineType) < 0) {
        Py_DECREF(&PipelineType);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
