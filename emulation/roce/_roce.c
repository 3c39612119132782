/* DCQCN's reaction and notification points and go-back-N, compiled (emulation/roce).
 *
 * The Python modules dcqcn.py and psn.py are the reference: every rule here is theirs, in
 * the same order and with the same floating-point operations, so the two agree to the bit
 * on any event trace (tests/roce/test_roce_compiled.py). A RoCE data path needs these per
 * packet and per timer tick (a CNP interval of 4 us, a rate timer of 300 us), which the
 * interpreter cannot keep up with beside 24 replicas on two cores; this file holds the
 * logic that such a loop will call, and replay functions that run it on a fake clock.
 *
 * dcqcn_replay(settings, events) -> [(rc, rt, alpha, timer_stage, byte_stage, cuts,
 *     cut_pending, timer_running)]
 *   settings: the tuple native.settings_tuple builds; events: (now, kind, nbytes) with
 *   kind 0 advance, 1 CNP, 2 bytes sent. One result per event, after it.
 * np_replay(min_interval, events) -> [cnp_sent]   events: (now, ce)
 * gbn_rx_replay(expected, events) -> [(accept, reply, reply_psn)]
 *   events: (psn, ack_request); reply 0 none, 1 ACK, 2 NAK.
 * gbn_tx_replay(first_psn, packets, rto, events) -> [(sent_psn or -1, base, next,
 *     retransmits, timeouts)]
 *   events: (kind, now, psn) with kind 0 send next, 1 ACK, 2 NAK, 3 timer check.
 *
 * One flow on real sockets (a connected UDP socket for the sender, a bound one for the
 * receiver), the GIL released while they run:
 * sender(fd, settings, qpn, first_psn, packets, payload, overhead, rto, ack_every, timeout_s)
 *   -> (status, err, sent, cnps, cuts, retransmits, timeouts, naks, rc, min_rc)
 *   paced at DCQCN's Rc per wire bytes (payload + BTH + ICRC + overhead), go-back-N.
 * receiver(fd, cnp_interval, qpn, first_psn, packets, linger_s, timeout_s, drop)
 *   -> (status, err, accepted, dropped, naks, marked, cnps, lost)
 *   answers CE marks with CNPs and gaps with NAKs; drop: PSNs lost once on arrival (tests).
 * transfer(...): several QPs of one worker through one step or a cut-through relay, each
 *   paced at its DCQCN rate under the NIC's line rate, honouring PFC pause frames (see
 *   the section "several QPs of one worker" below).
 * pause_replay(frame, priority, link_bps) -> (quanta, seconds) or None: the pause an
 *   802.1Qbb frame gives `priority` (pfc.py is the reference).
 * status: 0 done, 1 a send failed, 2 a receive failed (err: errno), 3 no progress for
 * timeout_s. A signal whose Python handler raises (Ctrl-C) ends either with that exception.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <linux/if_packet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* --- DCQCN (dcqcn.py) ------------------------------------------------------------ */

enum { INC_NONE = 0, INC_TIMER = 1, INC_BYTES = 2 };

typedef struct {
    double line, min_rate, g, alpha_period, initial_alpha, decrease_share, min_dec_fac;
    double monitor_period, rate_on_first_cnp;
    int clamp, clamp_after_time;
    double time_reset, byte_reset;
    long threshold;
    double ai, hai;
} settings_t;

typedef struct {
    double rc, rt, alpha;
    int limited;
    long timer_stage, byte_stage;
    double bytes;
    int timer_on;
    double timer_at;
    int alpha_on;
    double alpha_at;
    int cut_on;
    double last_cut_at;
    int cut_pending, last_increase;
    long cuts, cnps;
    /* MLTCP's F (mltcp.py): both increase steps times this; 0 (a zeroed buffer) is 1 */
    double gain;
} rp_t;

static void rp_start(const settings_t *s, rp_t *st) {
    memset(st, 0, sizeof(*st));
    st->rc = st->rt = s->line;
    st->alpha = s->initial_alpha;
}

static void decay_alpha(const settings_t *s, rp_t *st, double until) {
    if (!st->alpha_on || st->alpha_at > until)
        return;
    double n = floor((until - st->alpha_at) / s->alpha_period) + 1;
    st->alpha = st->alpha * pow(1 - s->g, n);
    st->alpha_at = st->alpha_at + n * s->alpha_period;
}

static void cut(const settings_t *s, rp_t *st, double now) {
    double rc, rt;
    if (s->rate_on_first_cnp > 0 && st->cuts == 0) {
        rc = rt = fmin(s->rate_on_first_cnp, s->line);
    } else {
        int clamp = s->clamp || st->last_increase == INC_BYTES;
        if (s->clamp_after_time && st->last_increase == INC_TIMER)
            clamp = 1;
        rt = clamp ? st->rc : st->rt;
        double factor = fmax(1 - st->alpha * s->decrease_share, s->min_dec_fac);
        rc = fmax(s->min_rate, st->rc * factor);
    }
    st->rc = rc;
    st->rt = fmax(rt, rc);
    st->timer_stage = st->byte_stage = 0;
    st->bytes = 0.0;
    st->timer_on = 1;
    st->timer_at = now + s->time_reset;
    st->cut_on = 1;
    st->last_cut_at = now;
    st->cut_pending = 0;
    st->last_increase = INC_NONE;
    st->cuts += 1;
}

static void increase(const settings_t *s, rp_t *st, int kind) {
    long f = s->threshold, t = st->timer_stage, bc = st->byte_stage;
    long hi = t > bc ? t : bc, lo = t < bc ? t : bc;
    double rt = st->rt, k = st->gain > 0 ? st->gain : 1.0;
    if (hi <= f) {
        /* fast recovery: Rt stays */
    } else if (lo > f) {
        rt = fmin(s->line, rt + (double)(lo - f) * (s->hai * k));
    } else {
        rt = fmin(s->line, rt + s->ai * k);
    }
    double rc = fmin(s->line, (rt + st->rc) / 2);
    if (s->line - rc <= s->line * 1e-6)
        rc = s->line;
    if (rc >= s->line && rt >= s->line)
        st->timer_on = 0;
    st->rc = rc;
    st->rt = rt;
    st->last_increase = kind;
}

static void rp_advance(const settings_t *s, rp_t *st, double now) {
    while (st->limited) {
        int pending_on = st->cut_pending && st->cut_on;
        double pending = pending_on ? st->last_cut_at + s->monitor_period : 0.0;
        int use_pending = pending_on && pending <= now;
        int use_timer = st->timer_on && st->timer_at <= now;
        if (!use_pending && !use_timer)
            break;
        double at;
        if (use_pending && use_timer)
            at = pending < st->timer_at ? pending : st->timer_at;
        else
            at = use_pending ? pending : st->timer_at;
        decay_alpha(s, st, at);
        if (pending_on && at == pending) {
            cut(s, st, at);
        } else {
            st->timer_stage += 1;
            st->timer_at = st->timer_at + s->time_reset;
            increase(s, st, INC_TIMER);
        }
    }
    decay_alpha(s, st, now);
}

static void rp_on_cnp(const settings_t *s, rp_t *st, double now) {
    rp_advance(s, st, now);
    if (!st->limited) {
        st->limited = 1;
        st->alpha = s->initial_alpha;
    }
    if (!st->cut_on || now - st->last_cut_at >= s->monitor_period)
        cut(s, st, now);
    else
        st->cut_pending = 1;
    st->alpha = (1 - s->g) * st->alpha + s->g;
    st->alpha_on = 1;
    st->alpha_at = now + s->alpha_period;
    st->cnps += 1;
}

static void rp_on_sent(const settings_t *s, rp_t *st, double nbytes, double now) {
    rp_advance(s, st, now);
    if (!st->limited || !st->timer_on)
        return;
    double counted = st->bytes + nbytes;
    while (counted >= s->byte_reset && st->timer_on) {
        counted -= s->byte_reset;
        st->byte_stage += 1;
        increase(s, st, INC_BYTES);
    }
    st->bytes = st->timer_on ? counted : 0.0;
}

/* --- go-back-N (psn.py) ---------------------------------------------------------- */

#define PSN_MASK 0xFFFFFFL
#define PSN_HALF 0x800000L

static long psn_add(long psn, long n) { return (psn + n) & PSN_MASK; }

static long psn_diff(long a, long b) {
    long d = (a - b) & PSN_MASK;
    return d >= PSN_HALF ? d - (PSN_MASK + 1) : d;
}

enum { REPLY_NONE = 0, REPLY_ACK = 1, REPLY_NAK = 2 };

typedef struct {
    long expected;
    int nak_sent;
    long accepted, dropped, naks;
} rx_t;

/* One packet: sets *accept, *reply, *reply_psn (rx_packet). */
static void rx_packet(rx_t *rx, long psn, int ack_request, int *accept, int *reply,
                      long *reply_psn) {
    long d = psn_diff(psn, rx->expected);
    if (d == 0) {
        rx->expected = psn_add(psn, 1);
        rx->nak_sent = 0;
        rx->accepted += 1;
        *accept = 1;
        *reply = ack_request ? REPLY_ACK : REPLY_NONE;
        *reply_psn = psn;
        return;
    }
    *accept = 0;
    rx->dropped += 1;
    if (d < 0) {
        *reply = REPLY_ACK;
        *reply_psn = psn_add(rx->expected, -1);
    } else if (rx->nak_sent) {
        *reply = REPLY_NONE;
        *reply_psn = rx->expected;
    } else {
        rx->nak_sent = 1;
        rx->naks += 1;
        *reply = REPLY_NAK;
        *reply_psn = rx->expected;
    }
}

typedef struct {
    long base, next, end;
    int timer_on;
    double timer_from, rto;
    long retransmits, timeouts;
} tx_t;

static long outstanding(const tx_t *tx) { return psn_diff(tx->next, tx->base); }

static long tx_next(tx_t *tx, double now) {
    if (tx->next == tx->end)
        return -1;
    if (!tx->timer_on) {
        tx->timer_on = 1;
        tx->timer_from = now;
    }
    long psn = tx->next;
    tx->next = psn_add(psn, 1);
    return psn;
}

static void acked_through(tx_t *tx, long first_unacked, double now) {
    long d = psn_diff(first_unacked, tx->base);
    if (d < 0 || d > outstanding(tx) || d == 0)
        return;
    tx->base = first_unacked;
    tx->timer_on = first_unacked != tx->next;
    tx->timer_from = tx->timer_on ? now : 0.0;
}

static void tx_on_nak(tx_t *tx, long psn, double now) {
    tx_t acked = *tx;
    acked_through(&acked, psn, now);
    if (acked.base != psn)
        return;
    long resend = psn_diff(tx->next, psn);
    *tx = acked;
    tx->next = psn;
    tx->timer_on = 1;
    tx->timer_from = now;
    tx->retransmits += resend;
}

static void tx_on_timer(tx_t *tx, double now) {
    if (!tx->timer_on || now - tx->timer_from < tx->rto)
        return;
    tx->retransmits += outstanding(tx);
    tx->next = tx->base;
    tx->timer_from = now;
    tx->timeouts += 1;
}

/* --- one flow over a UDP socket ---------------------------------------------------- */

/* RoCEv2 from user space through a kernel UDP socket: the kernel writes the IP and UDP
 * headers (the IP identification among them), so the ICRC cannot be computed and is sent
 * as zeros (bth.py, ICRC_ZERO); the receiver does not check it. One flow per socket (our
 * choice): CNPs and ACKs on the sender's socket are its flow's. */

enum { OP_SEND_FIRST = 0x00, OP_SEND_MIDDLE = 0x01, OP_SEND_LAST = 0x02, OP_SEND_ONLY = 0x04,
       OP_ACK = 0x11, OP_CNP = 0x81 };
enum { PATH_DONE = 0, PATH_SEND_FAILED = 1, PATH_RECV_FAILED = 2, PATH_NO_PROGRESS = 3,
       PATH_INTERRUPTED = 4 };
#define BTH_LEN 12
#define AETH_LEN 4
#define ICRC_LEN 4
#define CNP_PAD 16
#define MAX_PAYLOAD 9000
#define PACING_CREDIT 2.0

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* bth.Bth(opcode, dest_qp, psn, ack_request, becn=becn).pack(), P_Key 0xffff */
static void put_bth(unsigned char *p, int opcode, long qpn, long psn, int ack_request, int becn) {
    p[0] = (unsigned char)opcode;
    p[1] = 0;
    p[2] = p[3] = 0xFF;
    put_u32(p + 4, (becn ? 1u << 30 : 0) | ((uint32_t)qpn & PSN_MASK));
    put_u32(p + 8, (ack_request ? 1u << 31 : 0) | ((uint32_t)psn & PSN_MASK));
}

/* Wait for fd to be readable for at most wait_s; 1 readable, 0 not, -1 failed (errno). */
static int wait_readable(int fd, double wait_s) {
    if (wait_s < 0)
        wait_s = 0;
    struct timespec ts = {(time_t)wait_s, (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
    struct pollfd pfd = {fd, POLLIN, 0};
    int ready = ppoll(&pfd, 1, &ts, NULL);
    return ready < 0 ? -1 : ready > 0;
}

/* A wait cut short by a signal: run Python's handlers (with the GIL); 1 if one raised. */
static int signalled(PyThreadState **ts) {
    PyEval_RestoreThread(*ts);
    int raised = PyErr_CheckSignals() < 0;
    *ts = PyEval_SaveThread();
    return raised;
}

typedef struct {
    int status, err;
    long cnps, cuts, retransmits, timeouts, naks, sent;
    double rc, min_rc;
} send_result_t;

static void run_sender(int fd, const settings_t *s, long qpn, long first, long packets,
                       long payload, long overhead, double rto, long ack_every, double timeout_s,
                       send_result_t *res, PyThreadState **ts) {
    unsigned char out[BTH_LEN + MAX_PAYLOAD + ICRC_LEN], in[256];
    memset(out, 0, sizeof(out));
    rp_t st;
    rp_start(s, &st);
    tx_t tx = {first & PSN_MASK, first & PSN_MASK, psn_add(first, packets), 0, 0.0, rto, 0, 0};
    double now = monotonic_s(), next_send = now, last_progress = now;
    double wire_bits = 8.0 * (double)(BTH_LEN + payload + ICRC_LEN + overhead);
    res->min_rc = st.rc;
    while (tx.base != tx.end) {
        now = monotonic_s();
        rp_advance(s, &st, now);
        tx_on_timer(&tx, now);
        if (now - last_progress > timeout_s) {
            res->status = PATH_NO_PROGRESS;
            break;
        }
        if (tx.next != tx.end && now >= next_send) {
            long index = psn_diff(tx.next, first & PSN_MASK);
            int opcode = packets == 1           ? OP_SEND_ONLY
                         : index == 0           ? OP_SEND_FIRST
                         : index == packets - 1 ? OP_SEND_LAST
                                                : OP_SEND_MIDDLE;
            int ack_request = (index + 1) % ack_every == 0 || index == packets - 1;
            long psn = tx_next(&tx, now);
            put_bth(out, opcode, qpn, psn, ack_request, 0);
            if (send(fd, out, (size_t)(BTH_LEN + payload + ICRC_LEN), 0) < 0 && errno != EINTR &&
                errno != ENOBUFS && errno != EAGAIN) {
                res->status = PATH_SEND_FAILED;
                res->err = errno;
                break;
            }
            res->sent += 1;
            rp_on_sent(s, &st, wire_bits / 8.0, now);
            /* (our choice) a wake-up that comes late may catch up by up to PACING_CREDIT
             * packets sent back to back, so the timer's slack does not lower the rate;
             * idle time beyond that is not banked. */
            double gap = wire_bits / st.rc, floor_at = now - PACING_CREDIT * gap;
            next_send = (next_send > floor_at ? next_send : floor_at) + gap;
            if (st.rc < res->min_rc)
                res->min_rc = st.rc;
            continue;
        }
        double wait = tx.next != tx.end ? next_send - now : 1e-3;
        int ready = wait_readable(fd, wait);
        if (ready < 0 && errno == EINTR && signalled(ts)) {
            res->status = PATH_INTERRUPTED;
            break;
        }
        if (ready < 0 && errno != EINTR) {
            res->status = PATH_RECV_FAILED;
            res->err = errno;
            break;
        }
        while (ready > 0) {
            ssize_t n = recv(fd, in, sizeof(in), MSG_DONTWAIT);
            if (n < 0)
                break;
            now = monotonic_s();
            if (n < BTH_LEN)
                continue;
            long psn = (long)(get_u32(in + 8) & PSN_MASK);
            if (in[0] == OP_CNP) {
                rp_on_cnp(s, &st, now);
                if (st.rc < res->min_rc)
                    res->min_rc = st.rc;
            } else if (in[0] == OP_ACK && n >= BTH_LEN + AETH_LEN) {
                long base = tx.base;
                if ((in[BTH_LEN] & 0x60) == 0x60) {
                    res->naks += 1;
                    tx_on_nak(&tx, psn, now);
                } else if ((in[BTH_LEN] & 0x60) == 0) {
                    acked_through(&tx, psn_add(psn, 1), now);
                }
                if (tx.base != base)
                    last_progress = now;
            }
        }
    }
    res->cnps = st.cnps;
    res->cuts = st.cuts;
    res->retransmits = tx.retransmits;
    res->timeouts = tx.timeouts;
    res->rc = st.rc;
}

typedef struct {
    int status, err;
    long accepted, dropped, naks, marked, cnps, lost;
} recv_result_t;

/* A received datagram's ECN bits (IP_RECVTOS) and when it arrived: the kernel's stamp
 * (SO_TIMESTAMPNS) on the monotonic clock when there is one, else `now`. The NP's CNP
 * interval runs on arrivals, not on when a descheduled loop got round to reading them. */
static int read_cmsgs(struct msghdr *msg, double now, double *at) {
    int tos = 0;
    *at = now;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
            tos = *(unsigned char *)CMSG_DATA(c);
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec stamp, real;
            memcpy(&stamp, CMSG_DATA(c), sizeof(stamp));
            clock_gettime(CLOCK_REALTIME, &real);
            double age = ((double)real.tv_sec - (double)stamp.tv_sec) +
                         ((double)real.tv_nsec - (double)stamp.tv_nsec) * 1e-9;
            if (age > 0)
                *at = now - age;
        }
    }
    return tos;
}

static void run_receiver(int fd, double cnp_interval, long qpn, long first, long packets,
                         double linger_s, double timeout_s, const long *drop, Py_ssize_t n_drop,
                         unsigned char *dropped_once, recv_result_t *res, PyThreadState **ts) {
    unsigned char in[BTH_LEN + MAX_PAYLOAD + ICRC_LEN + 64];
    unsigned char reply[BTH_LEN + CNP_PAD + ICRC_LEN];
    char control[128];
    rx_t rx = {first & PSN_MASK, 0, 0, 0, 0};
    long end = psn_add(first, packets);
    int np_sent = 0;
    double np_last = 0.0, now = monotonic_s(), last_progress = now, done_at = -1;
    while (1) {
        now = monotonic_s();
        if (done_at < 0 && rx.expected == end)
            done_at = now;
        if (done_at >= 0 && now - done_at >= linger_s)
            break;
        if (done_at < 0 && now - last_progress > timeout_s) {
            res->status = PATH_NO_PROGRESS;
            break;
        }
        int ready = wait_readable(fd, 1e-3);
        if (ready < 0 && errno == EINTR && signalled(ts)) {
            res->status = PATH_INTERRUPTED;
            break;
        }
        if (ready < 0 && errno != EINTR) {
            res->status = PATH_RECV_FAILED;
            res->err = errno;
            break;
        }
        if (ready <= 0)
            continue;
        struct sockaddr_storage from;
        struct iovec iov = {in, sizeof(in)};
        struct msghdr msg = {&from, sizeof(from), &iov, 1, control, sizeof(control), 0};
        ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
        if (n < BTH_LEN || in[0] > OP_SEND_ONLY)
            continue;
        now = monotonic_s();
        double at;
        int tos = read_cmsgs(&msg, now, &at);
        long psn = (long)(get_u32(in + 8) & PSN_MASK);
        int ack_request = in[8] >> 7, lost = 0;
        for (Py_ssize_t k = 0; k < n_drop; k++)
            if (!dropped_once[k] && (drop[k] & PSN_MASK) == psn) {
                dropped_once[k] = 1;
                lost = 1;
            }
        if (lost) { /* a test's loss: as if the fabric had dropped it */
            res->lost += 1;
            continue;
        }
        if ((tos & 3) == 3) { /* CE: np_on_packet */
            res->marked += 1;
            if (!np_sent || at - np_last >= cnp_interval) {
                np_sent = 1;
                np_last = at;
                memset(reply, 0, sizeof(reply));
                put_bth(reply, OP_CNP, qpn, 0, 0, 1);
                if (sendto(fd, reply, BTH_LEN + CNP_PAD + ICRC_LEN, 0, (struct sockaddr *)&from,
                           msg.msg_namelen) >= 0)
                    res->cnps += 1;
            }
        }
        int accept, code;
        long reply_psn;
        rx_packet(&rx, psn, ack_request, &accept, &code, &reply_psn);
        if (accept)
            last_progress = now;
        if (code == REPLY_NONE)
            continue;
        memset(reply, 0, sizeof(reply));
        put_bth(reply, OP_ACK, qpn, reply_psn, 0, 0);
        /* AETH: ACK with no credits (0x1f) or NAK PSN sequence error (0x60); (our choice)
         * MSN 0, the flow being one message */
        put_u32(reply + BTH_LEN, (uint32_t)(code == REPLY_NAK ? 0x60 : 0x1F) << 24);
        sendto(fd, reply, BTH_LEN + AETH_LEN + ICRC_LEN, 0, (struct sockaddr *)&from,
               msg.msg_namelen);
    }
    res->accepted = rx.accepted;
    res->dropped = rx.dropped;
    res->naks = rx.naks;
}

/* --- several QPs of one worker in one loop (the replicas' collectives) -------------------
 *
 * transfer(settings, payload, overhead, rto, ack_every, timeout_s, cnp_interval, recv_fd,
 *          senders, receivers, header, relay, pfc[, mltcp])
 *   senders: (fd, qpn, first_psn, state, steps) per QP this worker sends on: a connected UDP
 *     socket, the peer's QP number, the PSN this call starts at, a writable buffer of
 *     RP_STATE_BYTES holding the QP's DCQCN state across calls (zeros: at line rate), and
 *     the payload bytes of each step (each step adds its header byte in front).
 *   receivers: (qpn, first_psn, steps) per QP this worker receives on, all through
 *     recv_fd (one UDP socket per worker, told apart by the BTH's destination QP).
 *   relay: packet i of send step k >= 1 leaves once packet i of receive step k-1 (of the
 *     first receiver) is in, as the ring's relay cuts steps through (ring.Ring.relay).
 *   pfc: None or (fd, priority, link_bps, paused_until): an AF_PACKET socket reading the
 *     host port's 802.1Qbb frames; data stops while the priority is paused.
 *   mltcp: None or (slope, intercept, total, sent): every QP's increase steps times MLTCP's F
 *     of the iteration's bytes sent (`sent` before this call) over `total` (mltcp.py).
 * -> (status, err, side, index, heard, pause_frames, paused_s, paused_until,
 *     [(sent, cnps, cuts, retransmits, timeouts, naks, rc, min_rc)],
 *     [(accepted, marked, cnps, naks, early)])
 * Each step's first payload byte is the header: `header` merged with every header heard
 * so far (stop: OR of bit 0; skip: the largest of bits 1-7, header.Header.merge).
 * A whole NIC paces all its QPs at the line rate together, each QP at its DCQCN Rc. */

#define MAX_QPS 32
#define RP_STATE_BYTES 512
_Static_assert(sizeof(rp_t) <= RP_STATE_BYTES, "a QP's DCQCN state fits its buffer");

typedef struct {
    int fd;
    long qpn, first, packets, nsteps;
    long *start; /* packet index where each step starts, nsteps + 1 entries */
    long *bytes; /* bytes of each step, header included */
    rp_t *rp;
    tx_t tx;
    double next_send;
    long sent, naks, cnps0, cuts0;
    long fresh; /* packets of this call sent at least once (MLTCP's byte count) */
    double min_rc;
} sq_t;

typedef struct {
    long qpn, first, packets, nsteps, end;
    long *start, *bytes;
    rx_t rx;
    int np_sent;
    double np_last;
    long marked, cnps, early;
} rq_t;

static int merge_header(int a, int b) {
    int skip = (a >> 1) > (b >> 1) ? (a >> 1) : (b >> 1);
    return (skip << 1) | ((a | b) & 1);
}

/* The step holding packet `index` (start[] ascending, start[0] = 0). */
static long step_of(const long *start, long nsteps, long index) {
    long lo = 0, hi = nsteps - 1;
    while (lo < hi) {
        long mid = (lo + hi + 1) / 2;
        if (start[mid] <= index)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Whether the relay lets packet `index` of the send stream leave yet. */
static int relay_allows(const sq_t *q, const rq_t *r, long index) {
    long k = step_of(q->start, q->nsteps, index);
    if (k == 0)
        return 1;
    if (k - 1 >= r->nsteps)
        return r->rx.expected == r->end;
    long in = psn_diff(r->rx.expected, r->first) - r->start[k - 1];
    long need = r->start[k] - r->start[k - 1];
    long j = index - q->start[k] + 1;
    if (j < need)
        need = j;
    return in >= need;
}

/* pfc.pause_seconds: quanta of 512 bit times at the link's rate. */
static double pause_seconds(long quanta, double link_bps) { return (double)quanta * 512.0 / link_bps; }

/* pfc.pause_quanta: the quanta an 802.1Qbb frame gives `priority`, or -1 (not one, or
 * not for it). */
static long pfc_quanta(const unsigned char *f, ssize_t n, int priority) {
    if (n < 34 || f[12] != 0x88 || f[13] != 0x08 || f[14] != 0x01 || f[15] != 0x01)
        return -1;
    int enabled = (f[16] << 8) | f[17];
    if (!(enabled & (1 << priority)))
        return -1;
    return (long)((f[18 + 2 * priority] << 8) | f[19 + 2 * priority]);
}

typedef struct {
    int fd, priority;
    double link_bps, paused_until, paused_s, mono_minus_real;
    long frames;
} pfc_t;

static void read_pauses(pfc_t *p, double now) {
    unsigned char frame[128];
    char control[128];
    for (int k = 0; k < 64; k++) {
        struct sockaddr_ll from;
        struct iovec iov = {frame, sizeof(frame)};
        struct msghdr msg = {&from, sizeof(from), &iov, 1, control, sizeof(control), 0};
        ssize_t n = recvmsg(p->fd, &msg, MSG_DONTWAIT);
        if (n < 0)
            return;
        if (from.sll_pkttype == PACKET_OUTGOING)
            continue;
        long quanta = pfc_quanta(frame, n, p->priority);
        if (quanta < 0)
            continue;
        double at = now; /* when the frame arrived, from its kernel time stamp if any */
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof(ts));
                double stamped = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + p->mono_minus_real;
                if (stamped < at)
                    at = stamped;
            }
        double until = at + pause_seconds(quanta, p->link_bps);
        double from_t = p->paused_until > at ? p->paused_until : at;
        if (quanta == 0) { /* XON: what was left of the pause is not spent paused */
            if (p->paused_until > at)
                p->paused_s -= p->paused_until - at;
            p->paused_until = at;
            continue;
        }
        p->frames += 1;
        if (until > from_t)
            p->paused_s += until - from_t;
        if (until > p->paused_until)
            p->paused_until = until;
    }
}

typedef struct {
    int status, err, side;
    long index;
    int heard;
} xfer_result_t;

/* Batching (our choice): one wake-up sends every packet due within the next
 * PACING_QUANTUM_S (up to TX_BATCH, one sendmmsg per run of one QP's packets), so a QP at
 * 50 Mbit/s (177 us a packet) wakes about every 0.5 ms for 3 packets instead of every
 * packet; the receive side reads at most once per quantum (PFC frames excepted), then
 * everything queued with recvmmsg, and answers with one sendmmsg. Each packet keeps its
 * own datagram, PSN and ECN bits: the switch sees the same frames, up to 0.5 ms early. */
#define PACING_QUANTUM_S 0.0005
#define TX_BATCH 32
#define RX_BATCH 32
#define REPLY_BATCH (2 * RX_BATCH)
#define SMALL_IN 64

/* The QP due first among those with a packet allowed out, and when (-1: none). */
static int next_qp(const sq_t *sq, int nsq, const rq_t *rq, int nrq, int relay, double nic_next,
                   double now, double *due) {
    int best = -1;
    *due = now + 1e-3;
    for (int i = 0; i < nsq; i++) {
        if (sq[i].tx.next == sq[i].tx.end)
            continue;
        long index = psn_diff(sq[i].tx.next, sq[i].first);
        if (relay && i == 0 && nrq > 0 && !relay_allows(&sq[i], &rq[0], index))
            continue;
        double at = sq[i].next_send > nic_next ? sq[i].next_send : nic_next;
        if (best < 0 || at < *due) {
            best = i;
            *due = at;
        }
    }
    return best;
}

/* Replies (ACKs, NAKs, CNPs) gathered over one read of recv_fd, sent in one sendmmsg. */
typedef struct {
    unsigned char buf[REPLY_BATCH][BTH_LEN + CNP_PAD + ICRC_LEN];
    struct sockaddr_storage to[REPLY_BATCH];
    struct iovec iov[REPLY_BATCH];
    struct mmsghdr mm[REPLY_BATCH];
    int n;
} replies_t;

static unsigned char *reply_slot(replies_t *r, const struct sockaddr_storage *to, socklen_t len,
                                 size_t size) {
    unsigned char *p = r->buf[r->n];
    memset(p, 0, sizeof(r->buf[0]));
    memcpy(&r->to[r->n], to, len);
    r->iov[r->n] = (struct iovec){p, size};
    r->mm[r->n] = (struct mmsghdr){{&r->to[r->n], len, &r->iov[r->n], 1, NULL, 0, 0}, 0};
    r->n += 1;
    return p;
}

/* Send the gathered replies; returns how many went out. */
static int flush_replies(int fd, replies_t *r) {
    int sent = 0;
    while (sent < r->n) {
        int k = sendmmsg(fd, r->mm + sent, (unsigned)(r->n - sent), 0);
        if (k <= 0)
            break; /* a reply lost is a NAK or CNP lost: go-back-N's timeout covers it */
        sent += k;
    }
    r->n = 0;
    return sent;
}

typedef struct {
    rq_t *rq;
    int nrq, known, heard;
    double cnp_interval, last_progress;
} rx_ctx_t;

/* One data packet read from recv_fd: the notification point and go-back-N's receiver. */
static void on_data(rx_ctx_t *c, const unsigned char *in, ssize_t n, struct msghdr *msg,
                    double now, replies_t *out) {
    if (n < BTH_LEN || in[0] > OP_SEND_ONLY || out->n + 2 > REPLY_BATCH)
        return;
    long qpn = (long)(get_u32(in + 4) & PSN_MASK);
    rq_t *r = NULL;
    for (int i = 0; i < c->nrq; i++)
        if (c->rq[i].qpn == qpn)
            r = &c->rq[i];
    if (r == NULL)
        return;
    double at;
    int tos = read_cmsgs(msg, monotonic_s(), &at);
    const struct sockaddr_storage *from = msg->msg_name;
    if ((tos & 3) == 3) { /* CE: the notification point (np_on_packet) */
        r->marked += 1;
        if (!r->np_sent || at - r->np_last >= c->cnp_interval) {
            r->np_sent = 1;
            r->np_last = at;
            put_bth(reply_slot(out, from, msg->msg_namelen, BTH_LEN + CNP_PAD + ICRC_LEN), OP_CNP,
                    qpn, 0, 0, 1);
            r->cnps += 1;
        }
    }
    long psn = (long)(get_u32(in + 8) & PSN_MASK);
    if (r->rx.expected == r->end && psn_diff(psn, r->rx.expected) >= 0) {
        /* (our choice) the next call's packet while another QP's receive is still open
         * (the head cannot be held back then): left unanswered; the sender's go-back-N
         * sends it again once this worker listens */
        r->early += 1;
        return;
    }
    int accept, code;
    long reply_psn;
    rx_packet(&r->rx, psn, in[8] >> 7, &accept, &code, &reply_psn);
    if (accept) {
        c->last_progress = now;
        long index = psn_diff(psn, r->first);
        long k = step_of(r->start, r->nsteps, index);
        if (index == r->start[k] && n > BTH_LEN) {
            c->heard = merge_header(c->heard, in[BTH_LEN]);
            c->known = merge_header(c->known, in[BTH_LEN]);
        }
    }
    if (code == REPLY_NONE)
        return;
    unsigned char *p = reply_slot(out, from, msg->msg_namelen, BTH_LEN + AETH_LEN + ICRC_LEN);
    put_bth(p, OP_ACK, qpn, reply_psn, 0, 0);
    put_u32(p + BTH_LEN, (uint32_t)(code == REPLY_NAK ? 0x60 : 0x1F) << 24);
}

/* Packets still to come on every receive of this call. */
static long still_to_receive(const rq_t *rq, int nrq) {
    long left = 0;
    for (int i = 0; i < nrq; i++)
        left += psn_diff(rq[i].end, rq[i].rx.expected);
    return left;
}

/* Buffers of one call, on the heap: a batch of data packets out and in. */
typedef struct {
    unsigned char *out, *in;
    size_t out_stride, in_stride;
    int tx_fd[TX_BATCH], tx_q[TX_BATCH];
    struct iovec tx_iov[TX_BATCH], rx_iov[RX_BATCH];
    struct mmsghdr tx_mm[TX_BATCH], rx_mm[RX_BATCH];
    struct sockaddr_storage rx_from[RX_BATCH];
    char rx_control[RX_BATCH][128];
    unsigned char small[RX_BATCH][SMALL_IN];
    replies_t replies;
} xfer_bufs_t;

static void xfer_bufs_free(xfer_bufs_t *b) {
    if (b == NULL)
        return;
    PyMem_RawFree(b->out);
    PyMem_RawFree(b->in);
    PyMem_RawFree(b);
}

/* Zeroed buffers for payloads of `payload` bytes; NULL when out of memory. */
static xfer_bufs_t *xfer_bufs_new(long payload) {
    xfer_bufs_t *b = PyMem_RawCalloc(1, sizeof(xfer_bufs_t));
    if (b == NULL)
        return NULL;
    b->out_stride = (size_t)(BTH_LEN + payload + ICRC_LEN);
    b->in_stride = (size_t)(BTH_LEN + payload + ICRC_LEN + 64);
    b->out = PyMem_RawCalloc(TX_BATCH, b->out_stride);
    b->in = PyMem_RawCalloc(RX_BATCH, b->in_stride);
    if (b->out == NULL || b->in == NULL) {
        xfer_bufs_free(b);
        return NULL;
    }
    return b;
}

/* Send tx_mm[0..n) in runs of one socket; 0, or the errno of a failure the caller reports
 * (*failed_at: its packet). A full buffer or a refused port loses that packet, as one
 * send did before batching: go-back-N resends it. */
static int flush_sends(xfer_bufs_t *b, int n, int *failed_at) {
    int i = 0;
    while (i < n) {
        int run = 1;
        while (i + run < n && b->tx_fd[i + run] == b->tx_fd[i])
            run++;
        int k = sendmmsg(b->tx_fd[i], b->tx_mm + i, (unsigned)run, 0);
        if (k > 0) {
            i += k;
            continue;
        }
        if (k < 0 && errno != EINTR && errno != ENOBUFS && errno != EAGAIN &&
            errno != ECONNREFUSED) {
            *failed_at = i;
            return errno;
        }
        i += 1;
    }
    return 0;
}

/* MLTCP (mltcp.py): F = intercept + slope x f, f = the iteration's bytes sent (before this
 * call, plus this call's first transmissions, summed over the worker's QPs) over its total. */
typedef struct {
    int on;
    double slope, intercept, total, sent;
} mltcp_t;

static double mltcp_gain(const mltcp_t *m) {
    if (m->total <= 0)
        return 1.0;
    double f = m->sent / m->total;
    f = f < 0 ? 0 : (f > 1 ? 1 : f);
    return m->intercept + m->slope * f;
}

static void run_transfer(const settings_t *s, long payload, long overhead, double rto,
                         long ack_every, double timeout_s, double cnp_interval, int recv_fd,
                         sq_t *sq, int nsq, rq_t *rq, int nrq, int header, int relay,
                         pfc_t *pfc, mltcp_t *ml, xfer_bufs_t *b, xfer_result_t *res,
                         PyThreadState **ts) {
    rx_ctx_t c = {rq, nrq, header, 0, cnp_interval, 0.0};
    double now = monotonic_s(), nic_next = now, last_read = now - PACING_QUANTUM_S;
    c.last_progress = now;
    for (int i = 0; i < nsq; i++) {
        if (sq[i].rp->rc <= 0)
            rp_start(s, sq[i].rp);
        sq[i].tx = (tx_t){sq[i].first, sq[i].first, psn_add(sq[i].first, sq[i].packets), 0, 0.0,
                          rto, 0, 0};
        sq[i].next_send = now;
        sq[i].min_rc = sq[i].rp->rc;
        sq[i].cnps0 = sq[i].rp->cnps;
        sq[i].cuts0 = sq[i].rp->cuts;
    }
    for (int i = 0; i < nrq; i++)
        rq[i].rx = (rx_t){rq[i].first, 0, 0, 0, 0};
    for (int j = 0; j < TX_BATCH; j++) {
        unsigned char *p = b->out + (size_t)j * b->out_stride;
        memset(p, 0, b->out_stride);
        b->tx_iov[j] = (struct iovec){p, 0};
        b->tx_mm[j] = (struct mmsghdr){{NULL, 0, &b->tx_iov[j], 1, NULL, 0, 0}, 0};
    }
    struct pollfd pfds[MAX_QPS + 2];
    /* Every receive in and the head of recv_fd a next call's packet: recv_fd is left
     * alone for the rest of the call, so that packet waits in the kernel for the next
     * call instead of being lost to it (our choice; the ACK that ends this call and the
     * neighbour's next packets often come in the same wake-up). */
    int hold = 0;
    double last_pass = now;
    while (1) {
        now = monotonic_s();
        /* (our choice) go-back-N's timer stands still while PFC holds this host: a pause
         * lasts 1/S longer than on the testbed (0.67 s for 65535 quanta at 50 Mbit/s),
         * where it is far below the RTO; an ACK is only asked for every ACK_EVERY
         * packets, so a sender paused mid-way would time out with nothing lost. */
        double held = pfc == NULL ? 0.0 : fmin(now, pfc->paused_until) - last_pass;
        last_pass = now;
        int done = 1;
        for (int i = 0; i < nsq; i++) {
            if (ml->on)
                sq[i].rp->gain = mltcp_gain(ml);
            rp_advance(s, sq[i].rp, now);
            if (held > 0 && sq[i].tx.timer_on)
                sq[i].tx.timer_from += held;
            tx_on_timer(&sq[i].tx, now);
            if (sq[i].tx.base != sq[i].tx.end)
                done = 0;
        }
        for (int i = 0; i < nrq; i++)
            if (rq[i].rx.expected != rq[i].end)
                done = 0;
        if (done)
            break;
        if (now - c.last_progress > timeout_s) {
            res->status = PATH_NO_PROGRESS;
            res->side = 1; /* waiting for a receive unless every receive is in */
            res->index = 0;
            for (int i = 0; i < nrq; i++)
                if (rq[i].rx.expected != rq[i].end) {
                    res->index = i;
                    goto out;
                }
            res->side = 0;
            for (int i = 0; i < nsq; i++)
                if (sq[i].tx.base != sq[i].tx.end)
                    res->index = i;
            goto out;
        }
        int paused = pfc != NULL && now < pfc->paused_until;
        double due = now + 1e-3;
        int best = paused ? -1 : next_qp(sq, nsq, rq, nrq, relay, nic_next, now, &due);
        if (paused && pfc->paused_until < due)
            due = pfc->paused_until;
        if (best >= 0 && now + PACING_QUANTUM_S >= due) {
            /* every packet due within the quantum, in one batch */
            int nb = 0;
            while (best >= 0 && nb < TX_BATCH && now + PACING_QUANTUM_S >= due) {
                sq_t *q = &sq[best];
                long index = psn_diff(q->tx.next, q->first);
                long k = step_of(q->start, q->nsteps, index);
                long offset = (index - q->start[k]) * payload;
                long len = q->bytes[k] - offset < payload ? q->bytes[k] - offset : payload;
                int opcode = q->packets == 1           ? OP_SEND_ONLY
                             : index == 0              ? OP_SEND_FIRST
                             : index == q->packets - 1 ? OP_SEND_LAST
                                                       : OP_SEND_MIDDLE;
                int ack_request = (index + 1) % ack_every == 0 || index == q->packets - 1;
                long psn = tx_next(&q->tx, now);
                unsigned char *out = b->tx_iov[nb].iov_base;
                put_bth(out, opcode, q->qpn, psn, ack_request, 0);
                out[BTH_LEN] = offset == 0 ? (unsigned char)c.known : 0;
                b->tx_iov[nb].iov_len = (size_t)(BTH_LEN + len + ICRC_LEN);
                b->tx_fd[nb] = q->fd;
                b->tx_q[nb] = best;
                nb += 1;
                q->sent += 1;
                double bits = 8.0 * (double)(BTH_LEN + len + ICRC_LEN + overhead);
                /* a first transmission: the iteration moves on */
                if (ml->on && index >= q->fresh) {
                    q->fresh = index + 1;
                    ml->sent += (double)len;
                    q->rp->gain = mltcp_gain(ml);
                }
                rp_on_sent(s, q->rp, bits / 8.0, now);
                double gap = bits / q->rp->rc, floor_at = now - PACING_CREDIT * gap;
                q->next_send = (q->next_send > floor_at ? q->next_send : floor_at) + gap;
                double nic_gap = bits / s->line, nic_floor = now - PACING_CREDIT * nic_gap;
                nic_next = (nic_next > nic_floor ? nic_next : nic_floor) + nic_gap;
                if (q->rp->rc < q->min_rc)
                    q->min_rc = q->rp->rc;
                best = next_qp(sq, nsq, rq, nrq, relay, nic_next, now, &due);
            }
            int failed_at = 0, err = flush_sends(b, nb, &failed_at);
            if (err != 0) {
                res->status = PATH_SEND_FAILED;
                res->err = err;
                res->side = 0;
                res->index = b->tx_q[failed_at];
                goto out;
            }
            continue;
        }
        /* reads at most once a quantum: until then only PFC frames and the pacer wake us */
        int quiet = now < last_read + PACING_QUANTUM_S;
        int nfd = 0;
        for (int i = 0; i < nsq; i++)
            pfds[nfd++] = (struct pollfd){quiet ? -1 : sq[i].fd, POLLIN, 0};
        if (recv_fd >= 0)
            pfds[nfd++] = (struct pollfd){quiet ? -1 : recv_fd, hold ? 0 : POLLIN, 0};
        if (pfc != NULL)
            pfds[nfd++] = (struct pollfd){pfc->fd, POLLIN, 0};
        double wait = due - now;
        if (quiet && last_read + PACING_QUANTUM_S - now < wait)
            wait = last_read + PACING_QUANTUM_S - now;
        if (wait > 1e-3)
            wait = 1e-3;
        if (wait < 0)
            wait = 0;
        struct timespec tw = {0, (long)(wait * 1e9)};
        int ready = ppoll(pfds, (nfds_t)nfd, &tw, NULL);
        if (ready < 0 && errno == EINTR && signalled(ts)) {
            res->status = PATH_INTERRUPTED;
            goto out;
        }
        if (ready <= 0)
            continue;
        now = monotonic_s();
        int read_any = 0;
        for (int i = 0; i < nsq; i++) { /* ACKs, NAKs, CNPs */
            if (!(pfds[i].revents & (POLLIN | POLLERR)))
                continue; /* (POLLERR: a refused port, cleared by the read) */
            read_any = 1;
            for (int j = 0; j < RX_BATCH; j++) {
                b->rx_iov[j] = (struct iovec){b->small[j], SMALL_IN};
                b->rx_mm[j] = (struct mmsghdr){{NULL, 0, &b->rx_iov[j], 1, NULL, 0, 0}, 0};
            }
            for (int m = 0; m < 64;) {
                int got = recvmmsg(sq[i].fd, b->rx_mm, RX_BATCH, MSG_DONTWAIT, NULL);
                if (got <= 0)
                    break;
                m += got;
                for (int j = 0; j < got; j++) {
                    const unsigned char *in = b->small[j];
                    unsigned n = b->rx_mm[j].msg_len;
                    if (n < BTH_LEN)
                        continue;
                    long psn = (long)(get_u32(in + 8) & PSN_MASK);
                    if (in[0] == OP_CNP) {
                        rp_on_cnp(s, sq[i].rp, now);
                        if (sq[i].rp->rc < sq[i].min_rc)
                            sq[i].min_rc = sq[i].rp->rc;
                    } else if (in[0] == OP_ACK && n >= BTH_LEN + AETH_LEN) {
                        long base = sq[i].tx.base;
                        if ((in[BTH_LEN] & 0x60) == 0x60) {
                            sq[i].naks += 1;
                            tx_on_nak(&sq[i].tx, psn, now);
                        } else if ((in[BTH_LEN] & 0x60) == 0) {
                            acked_through(&sq[i].tx, psn_add(psn, 1), now);
                        }
                        if (sq[i].tx.base != base)
                            c.last_progress = now;
                    }
                }
                if (got < RX_BATCH)
                    break;
            }
        }
        if (recv_fd >= 0 && (pfds[nsq].revents & POLLIN)) {
            read_any = 1;
            for (int m = 0; m < 64 && !hold;) {
                long left = still_to_receive(rq, nrq);
                /* at most what this call still expects: a read never takes a next call's
                 * packet from a sender that sends in order */
                int want = left == 0 ? 1 : left < RX_BATCH ? (int)left : RX_BATCH;
                for (int j = 0; j < want; j++) {
                    b->rx_iov[j] = (struct iovec){b->in + (size_t)j * b->in_stride, b->in_stride};
                    b->rx_mm[j] = (struct mmsghdr){{&b->rx_from[j], sizeof(b->rx_from[j]),
                                                    &b->rx_iov[j], 1, b->rx_control[j],
                                                    sizeof(b->rx_control[j]), 0},
                                                   0};
                }
                if (left == 0) { /* look before taking: is the head a next call's packet? */
                    ssize_t peeked =
                        recvmsg(recv_fd, &b->rx_mm[0].msg_hdr, MSG_DONTWAIT | MSG_PEEK);
                    if (peeked < 0)
                        break;
                    const unsigned char *in = b->in;
                    if (peeked >= BTH_LEN && in[0] <= OP_SEND_ONLY) {
                        long head_qpn = (long)(get_u32(in + 4) & PSN_MASK);
                        long head_psn = (long)(get_u32(in + 8) & PSN_MASK);
                        for (int i = 0; i < nrq; i++)
                            if (rq[i].qpn == head_qpn && psn_diff(head_psn, rq[i].rx.expected) >= 0)
                                hold = 1;
                    }
                    if (hold)
                        break;
                    b->rx_mm[0].msg_hdr = (struct msghdr){&b->rx_from[0], sizeof(b->rx_from[0]),
                                                          &b->rx_iov[0], 1, b->rx_control[0],
                                                          sizeof(b->rx_control[0]), 0};
                }
                int got = recvmmsg(recv_fd, b->rx_mm, (unsigned)want, MSG_DONTWAIT, NULL);
                if (got <= 0)
                    break;
                m += got;
                for (int j = 0; j < got; j++)
                    on_data(&c, b->rx_iov[j].iov_base, (ssize_t)b->rx_mm[j].msg_len,
                            &b->rx_mm[j].msg_hdr, now, &b->replies);
                flush_replies(recv_fd, &b->replies);
                if (got < want)
                    break;
            }
        }
        if (read_any)
            last_read = now;
        if (pfc != NULL && (pfds[nfd - 1].revents & POLLIN))
            read_pauses(pfc, now);
    }
out:
    res->heard = c.heard;
}

/* Step byte counts (header included) and the packets each takes, from a sequence of
 * payload sizes; fills start[] (nsteps + 1) and bytes[]. 0 on a bad value (exception set). */
static int layout_steps(PyObject *steps, long payload, long **start, long **bytes, long *nsteps) {
    PyObject *seq = PySequence_Fast(steps, "steps must be a sequence of byte counts");
    if (seq == NULL)
        return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    *nsteps = (long)n;
    *start = PyMem_Calloc((size_t)n + 1, sizeof(long));
    *bytes = PyMem_Calloc((size_t)n + 1, sizeof(long));
    if (*start == NULL || *bytes == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return 0;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        long b = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
        if (b < 0) {
            Py_DECREF(seq);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "step %zd has %ld bytes", k, b);
            return 0;
        }
        (*bytes)[k] = b + 1;
        (*start)[k + 1] = (*start)[k] + (b + 1 + payload - 1) / payload;
    }
    Py_DECREF(seq);
    if (n == 0 || (*start)[n] >= PSN_HALF) {
        PyErr_Format(PyExc_ValueError, "a flow needs 1 to 2^23 - 1 packets, got %ld",
                     n == 0 ? 0 : (*start)[n]);
        return 0;
    }
    return 1;
}

/* --- Python bindings ------------------------------------------------------------- */

static int parse_settings(PyObject *tuple, settings_t *s) {
    return PyArg_ParseTuple(tuple, "dddddddddppddldd;settings: the 16 values of settings_tuple",
                            &s->line, &s->min_rate, &s->g, &s->alpha_period, &s->initial_alpha,
                            &s->decrease_share, &s->min_dec_fac, &s->monitor_period,
                            &s->rate_on_first_cnp, &s->clamp, &s->clamp_after_time,
                            &s->time_reset, &s->byte_reset, &s->threshold, &s->ai, &s->hai);
}

static PyObject *dcqcn_replay(PyObject *self, PyObject *args) {
    PyObject *stuple, *events;
    if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &stuple, &events))
        return NULL;
    settings_t s;
    if (!parse_settings(stuple, &s))
        return NULL;
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    rp_t st;
    rp_start(&s, &st);
    for (Py_ssize_t i = 0; i < n; i++) {
        double now, nbytes;
        int kind;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "did;an event is (now, kind, nbytes)",
                              &now, &kind, &nbytes))
            goto fail;
        if (kind == 0)
            rp_advance(&s, &st, now);
        else if (kind == 1)
            rp_on_cnp(&s, &st, now);
        else if (kind == 2)
            rp_on_sent(&s, &st, nbytes, now);
        else if (kind == 3 && nbytes > 0)
            st.gain = nbytes; /* MLTCP's F for the events after it */
        else {
            PyErr_Format(PyExc_ValueError,
                         "event kind %d: 0 advance, 1 CNP, 2 bytes sent, 3 MLTCP gain > 0", kind);
            goto fail;
        }
        PyObject *row = Py_BuildValue("(dddlllNN)", st.rc, st.rt, st.alpha, st.timer_stage,
                                      st.byte_stage, st.cuts, PyBool_FromLong(st.cut_pending),
                                      PyBool_FromLong(st.timer_on));
        if (row == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, row);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

static PyObject *np_replay(PyObject *self, PyObject *args) {
    double interval;
    PyObject *events;
    if (!PyArg_ParseTuple(args, "dO", &interval, &events))
        return NULL;
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    int sent_before = 0;
    double last = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double now;
        int ce;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "dp;an event is (now, ce)", &now,
                              &ce)) {
            Py_DECREF(seq);
            Py_DECREF(out);
            return NULL;
        }
        int cnp = ce && (!sent_before || now - last >= interval);
        if (cnp) {
            sent_before = 1;
            last = now;
        }
        PyList_SET_ITEM(out, i, PyBool_FromLong(cnp));
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *gbn_rx_replay(PyObject *self, PyObject *args) {
    long expected;
    PyObject *events;
    if (!PyArg_ParseTuple(args, "lO", &expected, &events))
        return NULL;
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    rx_t rx = {expected & PSN_MASK, 0, 0, 0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        long psn, reply_psn;
        int ack_request, accept, reply;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "lp;an event is (psn, ack_request)",
                              &psn, &ack_request)) {
            Py_DECREF(seq);
            Py_DECREF(out);
            return NULL;
        }
        rx_packet(&rx, psn & PSN_MASK, ack_request, &accept, &reply, &reply_psn);
        PyList_SET_ITEM(out, i, Py_BuildValue("(Nil)", PyBool_FromLong(accept), reply, reply_psn));
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *gbn_tx_replay(PyObject *self, PyObject *args) {
    long first, packets;
    double rto;
    PyObject *events;
    if (!PyArg_ParseTuple(args, "lldO", &first, &packets, &rto, &events))
        return NULL;
    if (packets < 0 || packets >= PSN_HALF) {
        PyErr_Format(PyExc_ValueError, "packets=%ld must be in [0, 2^23)", packets);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(events, "events must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    tx_t tx = {first & PSN_MASK, first & PSN_MASK, psn_add(first, packets), 0, 0.0, rto, 0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        int kind;
        double now;
        long psn, sent = -1;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "idl;an event is (kind, now, psn)",
                              &kind, &now, &psn)) {
            Py_DECREF(seq);
            Py_DECREF(out);
            return NULL;
        }
        if (kind == 0)
            sent = tx_next(&tx, now);
        else if (kind == 1)
            acked_through(&tx, psn_add(psn, 1), now);
        else if (kind == 2)
            tx_on_nak(&tx, psn & PSN_MASK, now);
        else
            tx_on_timer(&tx, now);
        PyList_SET_ITEM(out, i, Py_BuildValue("(lllll)", sent, tx.base, tx.next, tx.retransmits,
                                              tx.timeouts));
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *sender(PyObject *self, PyObject *args) {
    int fd;
    PyObject *stuple;
    long qpn, first, packets, payload, overhead, ack_every;
    double rto, timeout_s;
    if (!PyArg_ParseTuple(args, "iO!llllldld", &fd, &PyTuple_Type, &stuple, &qpn, &first,
                          &packets, &payload, &overhead, &rto, &ack_every, &timeout_s))
        return NULL;
    settings_t s;
    if (!parse_settings(stuple, &s))
        return NULL;
    if (packets < 1 || packets >= PSN_HALF || payload < 0 || payload > MAX_PAYLOAD ||
        ack_every < 1) {
        PyErr_Format(PyExc_ValueError,
                     "packets=%ld must be in [1, 2^23), payload=%ld in [0, %d], ack_every=%ld >= 1",
                     packets, payload, MAX_PAYLOAD, ack_every);
        return NULL;
    }
    send_result_t res;
    memset(&res, 0, sizeof(res));
    Py_BEGIN_ALLOW_THREADS
    run_sender(fd, &s, qpn, first, packets, payload, overhead, rto, ack_every, timeout_s, &res,
               &_save);
    Py_END_ALLOW_THREADS
    if (res.status == PATH_INTERRUPTED)
        return NULL; /* the handler's exception (KeyboardInterrupt) */
    return Py_BuildValue("(iilllllldd)", res.status, res.err, res.sent, res.cnps, res.cuts,
                         res.retransmits, res.timeouts, res.naks, res.rc, res.min_rc);
}

static PyObject *receiver(PyObject *self, PyObject *args) {
    int fd;
    double cnp_interval, linger_s, timeout_s;
    long qpn, first, packets;
    PyObject *drop_obj;
    if (!PyArg_ParseTuple(args, "idlllddO", &fd, &cnp_interval, &qpn, &first, &packets,
                          &linger_s, &timeout_s, &drop_obj))
        return NULL;
    PyObject *seq = PySequence_Fast(drop_obj, "drop must be a sequence of PSNs");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n_drop = PySequence_Fast_GET_SIZE(seq);
    long *drop = PyMem_Calloc((size_t)n_drop + 1, sizeof(long));
    unsigned char *once = PyMem_Calloc((size_t)n_drop + 1, 1);
    if (drop == NULL || once == NULL) {
        Py_DECREF(seq);
        PyMem_Free(drop);
        PyMem_Free(once);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n_drop; k++)
        drop[k] = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        PyMem_Free(drop);
        PyMem_Free(once);
        return NULL;
    }
    int on = 1;
    if (setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof(on)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) < 0) {
        PyMem_Free(drop);
        PyMem_Free(once);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    recv_result_t res;
    memset(&res, 0, sizeof(res));
    Py_BEGIN_ALLOW_THREADS
    run_receiver(fd, cnp_interval, qpn, first, packets, linger_s, timeout_s, drop, n_drop, once,
                 &res, &_save);
    Py_END_ALLOW_THREADS
    PyMem_Free(drop);
    PyMem_Free(once);
    if (res.status == PATH_INTERRUPTED)
        return NULL;
    return Py_BuildValue("(iillllll)", res.status, res.err, res.accepted, res.dropped, res.naks,
                         res.marked, res.cnps, res.lost);
}


static PyObject *transfer(PyObject *self, PyObject *args) {
    PyObject *stuple, *senders, *receivers, *pfc_obj, *mltcp_obj = Py_None;
    long payload, overhead, ack_every;
    double rto, timeout_s, cnp_interval;
    int recv_fd, header, relay;
    if (!PyArg_ParseTuple(args, "O!lldlddiOOipO|O", &PyTuple_Type, &stuple, &payload, &overhead,
                          &rto, &ack_every, &timeout_s, &cnp_interval, &recv_fd, &senders,
                          &receivers, &header, &relay, &pfc_obj, &mltcp_obj))
        return NULL;
    mltcp_t ml = {0, 0.0, 0.0, 0.0, 0.0};
    if (mltcp_obj != Py_None) {
        if (!PyArg_ParseTuple(mltcp_obj, "dddd;mltcp is (slope, intercept, total, sent)",
                              &ml.slope, &ml.intercept, &ml.total, &ml.sent))
            return NULL;
        if (!(ml.intercept > 0) || ml.slope < 0) {
            PyErr_SetString(PyExc_ValueError, "mltcp: intercept > 0 and slope >= 0");
            return NULL;
        }
        ml.on = 1;
    }
    settings_t s;
    if (!parse_settings(stuple, &s))
        return NULL;
    if (payload < 1 || payload > MAX_PAYLOAD || ack_every < 1) {
        PyErr_Format(PyExc_ValueError, "payload=%ld must be in [1, %d], ack_every=%ld >= 1",
                     payload, MAX_PAYLOAD, ack_every);
        return NULL;
    }
    PyObject *sseq = PySequence_Fast(senders, "senders must be a sequence");
    PyObject *rseq = sseq ? PySequence_Fast(receivers, "receivers must be a sequence") : NULL;
    sq_t sq[MAX_QPS];
    rq_t rq[MAX_QPS];
    Py_buffer views[MAX_QPS];
    int nsq = 0, nrq = 0, nviews = 0, ok = 0;
    memset(sq, 0, sizeof(sq));
    memset(rq, 0, sizeof(rq));
    pfc_t pfc;
    memset(&pfc, 0, sizeof(pfc));
    PyObject *result = NULL;
    if (rseq == NULL)
        goto cleanup;
    if (PySequence_Fast_GET_SIZE(sseq) > MAX_QPS || PySequence_Fast_GET_SIZE(rseq) > MAX_QPS) {
        PyErr_Format(PyExc_ValueError, "at most %d QPs each way", MAX_QPS);
        goto cleanup;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sseq); i++) {
        PyObject *steps;
        sq_t *q = &sq[nsq];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(sseq, i),
                              "illw*O;a sender is (fd, qpn, first_psn, state, steps)", &q->fd,
                              &q->qpn, &q->first, &views[nviews], &steps))
            goto cleanup;
        nviews++;
        nsq++;
        if (views[nviews - 1].len < (Py_ssize_t)sizeof(rp_t)) {
            PyErr_Format(PyExc_ValueError, "a QP's state needs %d bytes", RP_STATE_BYTES);
            goto cleanup;
        }
        q->rp = (rp_t *)views[nviews - 1].buf;
        q->first &= PSN_MASK;
        if (!layout_steps(steps, payload, &q->start, &q->bytes, &q->nsteps))
            goto cleanup;
        q->packets = q->start[q->nsteps];
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(rseq); i++) {
        PyObject *steps;
        rq_t *r = &rq[nrq];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(rseq, i),
                              "llO;a receiver is (qpn, first_psn, steps)", &r->qpn, &r->first,
                              &steps))
            goto cleanup;
        nrq++;
        r->first &= PSN_MASK;
        if (!layout_steps(steps, payload, &r->start, &r->bytes, &r->nsteps))
            goto cleanup;
        r->packets = r->start[r->nsteps];
        r->end = psn_add(r->first, r->packets);
    }
    if (relay && (nsq < 1 || nrq < 1 || sq[0].nsteps != rq[0].nsteps)) {
        PyErr_SetString(PyExc_ValueError, "a relay needs a sender and a receiver of as many steps");
        goto cleanup;
    }
    if (nrq > 0 && recv_fd < 0) {
        PyErr_SetString(PyExc_ValueError, "receivers need recv_fd");
        goto cleanup;
    }
    int on = 1;
    if (recv_fd >= 0 && (setsockopt(recv_fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof(on)) < 0 ||
                         setsockopt(recv_fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) < 0)) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto cleanup;
    }
    if (pfc_obj != Py_None) {
        if (!PyArg_ParseTuple(pfc_obj, "iidd;pfc is (fd, priority, link_bps, paused_until)",
                              &pfc.fd, &pfc.priority, &pfc.link_bps, &pfc.paused_until))
            goto cleanup;
        if (pfc.priority < 0 || pfc.priority > 7 || pfc.link_bps <= 0) {
            PyErr_SetString(PyExc_ValueError, "pfc: priority 0..7 and link_bps > 0");
            goto cleanup;
        }
        struct timespec real;
        clock_gettime(CLOCK_REALTIME, &real);
        pfc.mono_minus_real = monotonic_s() - ((double)real.tv_sec + (double)real.tv_nsec * 1e-9);
    }
    xfer_bufs_t *bufs = xfer_bufs_new(payload);
    if (bufs == NULL) {
        PyErr_NoMemory();
        goto cleanup;
    }
    ok = 1;
    xfer_result_t res;
    memset(&res, 0, sizeof(res));
    Py_BEGIN_ALLOW_THREADS
    run_transfer(&s, payload, overhead, rto, ack_every, timeout_s, cnp_interval, recv_fd, sq, nsq,
                 rq, nrq, header & 0xFF, relay, pfc_obj == Py_None ? NULL : &pfc, &ml, bufs, &res,
                 &_save);
    Py_END_ALLOW_THREADS
    xfer_bufs_free(bufs);
    if (res.status == PATH_INTERRUPTED)
        goto cleanup;
    PyObject *slist = PyList_New(nsq), *rlist = PyList_New(nrq);
    if (slist == NULL || rlist == NULL) {
        Py_XDECREF(slist);
        Py_XDECREF(rlist);
        goto cleanup;
    }
    for (int i = 0; i < nsq; i++)
        PyList_SET_ITEM(slist, i,
                        Py_BuildValue("(lllllldd)", sq[i].sent, sq[i].rp->cnps - sq[i].cnps0,
                                      sq[i].rp->cuts - sq[i].cuts0, sq[i].tx.retransmits,
                                      sq[i].tx.timeouts, sq[i].naks, sq[i].rp->rc, sq[i].min_rc));
    for (int i = 0; i < nrq; i++)
        PyList_SET_ITEM(rlist, i,
                        Py_BuildValue("(lllll)", rq[i].rx.accepted, rq[i].marked, rq[i].cnps,
                                      rq[i].rx.naks, rq[i].early));
    result = Py_BuildValue("(iiilildd" "NN)", res.status, res.err, res.side, res.index, res.heard,
                           pfc.frames, pfc.paused_s, pfc.paused_until, slist, rlist);
cleanup:
    (void)ok;
    for (int i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
    for (int i = 0; i < MAX_QPS; i++) {
        PyMem_Free(sq[i].start);
        PyMem_Free(sq[i].bytes);
        PyMem_Free(rq[i].start);
        PyMem_Free(rq[i].bytes);
    }
    Py_XDECREF(sseq);
    Py_XDECREF(rseq);
    return result;
}

static PyObject *pause_replay(PyObject *self, PyObject *args) {
    Py_buffer frame;
    int priority;
    double link_bps;
    if (!PyArg_ParseTuple(args, "y*id", &frame, &priority, &link_bps))
        return NULL;
    long quanta = pfc_quanta(frame.buf, frame.len, priority);
    PyBuffer_Release(&frame);
    if (quanta < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(ld)", quanta, pause_seconds(quanta, link_bps));
}

static PyMethodDef methods[] = {
    {"dcqcn_replay", dcqcn_replay, METH_VARARGS, "DCQCN's reaction point over an event trace."},
    {"np_replay", np_replay, METH_VARARGS, "DCQCN's notification point over (now, ce) events."},
    {"gbn_rx_replay", gbn_rx_replay, METH_VARARGS, "The go-back-N responder over packets."},
    {"gbn_tx_replay", gbn_tx_replay, METH_VARARGS, "The go-back-N requester over events."},
    {"sender", sender, METH_VARARGS, "Send one flow over a connected UDP socket."},
    {"receiver", receiver, METH_VARARGS, "Receive one flow from a UDP socket."},
    {"transfer", transfer, METH_VARARGS, "One worker's QPs through one step or relay."},
    {"pause_replay", pause_replay, METH_VARARGS, "An 802.1Qbb frame's quanta and seconds."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_roce", "DCQCN and go-back-N, compiled (see emulation/roce).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__roce(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "RP_STATE_BYTES", RP_STATE_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
