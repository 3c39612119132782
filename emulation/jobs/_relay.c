/* The ring's cut-through relay loop (emulation/jobs/ring.py, Ring.relay), compiled.
 *
 * The Python loop is the reference; this one does the same system calls in the same order
 * without the interpreter between them. A replica wakes for nearly every segment its left
 * neighbour sends (one per 245 us at 50 Mbit/s), and 24 replicas share two cores with the
 * hosts' stacks and the switch: the interpreter's share of each wake-up was the replicas'
 * largest user-space cost.
 *
 * relay(left_fd, right_fd, send_at, recv_at, header, nap_bytes, nap_s, timeout_s,
 *       scratch, zeros) -> (status, received, sent, known, err)
 * send_at / recv_at: each step's start in its stream (1 header byte + payload), the total
 * last. scratch: where received bytes go (the Ring's); zeros: the send window, all zeros
 * (each header byte is set for one send and cleared again), at most its size per send. status: 0 done, 1 the left closed, 2 a receive failed (err: errno), 3 a send failed
 * (err: errno), 4 no progress for timeout_s (err: 0 the left, 1 the right was awaited).
 * A signal that Python's handler turns into an exception ends the call with it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

enum { DONE = 0, LEFT_CLOSED = 1, RECV_FAILED = 2, SEND_FAILED = 3, NO_PROGRESS = 4 };

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Any stop wish, the largest skip (header.Header.merge on header bytes). */
static int merge(int a, int b) {
    int skip = (a >> 1) > (b >> 1) ? (a >> 1) : (b >> 1);
    return (skip << 1) | ((a | b) & 1);
}

/* First k with at[k] >= value (bisect_left over the step starts at[0..n)). */
static Py_ssize_t first_at_or_after(const long long *at, Py_ssize_t n, long long value) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (at[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ring.relay_limit: step 0 freely, byte j of step k once byte j of step k-1 is in. */
static long long relay_limit(const long long *send_at, const long long *recv_at,
                             Py_ssize_t steps, long long received) {
    /* steps fully in: the last k with recv_at[k] <= received (bisect_right - 1) */
    Py_ssize_t lo = 0, hi = steps + 1;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (recv_at[mid] <= received)
            lo = mid + 1;
        else
            hi = mid;
    }
    Py_ssize_t done = lo - 1;
    if (done >= steps) return send_at[steps];
    long long limit = send_at[done + 1];
    if (done + 1 < steps) {
        long long more = received - recv_at[done], room = send_at[done + 2] - send_at[done + 1];
        limit += more < room ? more : room;
    }
    return limit;
}

static long long *long_array(PyObject *seq, Py_ssize_t *n, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    long long *out = PyMem_Malloc((size_t)(*n > 0 ? *n : 1) * sizeof(long long));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            PyMem_Free(out);
            return NULL;
        }
        if (i > 0 && out[i] < out[i - 1]) {
            Py_DECREF(fast);
            PyMem_Free(out);
            PyErr_Format(PyExc_ValueError, "%s: step starts must not decrease", what);
            return NULL;
        }
    }
    Py_DECREF(fast);
    return out;
}

static PyObject *relay(PyObject *Py_UNUSED(module), PyObject *args) {
    int left, right, header;
    PyObject *send_obj, *recv_obj;
    long long nap_bytes;
    double nap_s, timeout_s;
    Py_buffer scratch_view, out_view;
    if (!PyArg_ParseTuple(args, "iiOOiLddw*w*", &left, &right, &send_obj, &recv_obj, &header,
                          &nap_bytes, &nap_s, &timeout_s, &scratch_view, &out_view))
        return NULL;
    Py_ssize_t n_send = 0, n_recv = 0;
    long long *send_at = NULL, *recv_at = NULL;
    send_at = long_array(send_obj, &n_send, "send_at");
    if (send_at != NULL) recv_at = long_array(recv_obj, &n_recv, "recv_at");
    if (recv_at != NULL &&
        (n_send != n_recv || n_send < 1 || send_at[0] != 0 || recv_at[0] != 0 ||
         scratch_view.len < 1 || out_view.len < 1))
        PyErr_SetString(PyExc_ValueError, "send_at and recv_at: one start per step from 0, "
                                          "the total last, as many of each; two buffers");
    if (PyErr_Occurred()) {
        PyMem_Free(send_at);
        PyMem_Free(recv_at);
        PyBuffer_Release(&scratch_view);
        PyBuffer_Release(&out_view);
        return NULL;
    }
    unsigned char *scratch = scratch_view.buf, *out = out_view.buf;
    long long scratch_bytes = scratch_view.len, window_bytes = out_view.len;
    Py_ssize_t steps = n_send - 1;
    long long send_total = send_at[steps], recv_total = recv_at[steps];
    long long sent = 0, received = 0, far = 2 * nap_bytes;
    int known = header & 0xFF, status = DONE, err = 0, raised = 0;
    struct timespec nap = {(time_t)nap_s, (long)((nap_s - (time_t)nap_s) * 1e9)};

    Py_BEGIN_ALLOW_THREADS
    double last_progress = monotonic_s();
    while (sent < send_total || received < recv_total) {
        long long limit = relay_limit(send_at, recv_at, steps, received);
        /* A socket not waited for is left out (fd -1), or its hang-up would wake us. */
        struct pollfd pfd[2] = {{received < recv_total ? left : -1, POLLIN, 0},
                                {sent < limit ? right : -1, POLLOUT, 0}};
        int ready = poll(pfd, 2, 500);
        if (ready < 0) {
            if (errno != EINTR) {
                status = RECV_FAILED;
                err = errno;
                break;
            }
            Py_BLOCK_THREADS
            raised = PyErr_CheckSignals() < 0;
            Py_UNBLOCK_THREADS
            if (raised) break;
            continue;
        }
        if (ready == 0) {
            if (monotonic_s() - last_progress > timeout_s) {
                status = NO_PROGRESS;
                err = received < recv_total ? 0 : 1;
                break;
            }
            continue;
        }
        if (pfd[0].revents) {
            long long want = recv_total - received;
            if (want > scratch_bytes) want = scratch_bytes;
            ssize_t n = recv(left, scratch, (size_t)want, MSG_DONTWAIT);
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                status = RECV_FAILED;
                err = errno;
                break;
            }
            if (n == 0) {
                status = LEFT_CLOSED;
                break;
            }
            if (n > 0) {
                for (Py_ssize_t k = first_at_or_after(recv_at, steps, received); k < steps; k++) {
                    if (recv_at[k] >= received + n) break;
                    known = merge(known, scratch[recv_at[k] - received]);
                }
                received += n;
                last_progress = monotonic_s();
            }
        }
        if (pfd[1].revents) {
            long long end = sent + window_bytes < limit ? sent + window_bytes : limit;
            Py_ssize_t first = first_at_or_after(send_at, steps, sent), k;
            for (k = first; k < steps && send_at[k] < end; k++) out[send_at[k] - sent] = known;
            ssize_t n = send(right, out, (size_t)(end - sent), MSG_DONTWAIT | MSG_NOSIGNAL);
            int send_errno = errno;
            for (Py_ssize_t j = first; j < k; j++) out[send_at[j] - sent] = 0;
            if (n < 0 && send_errno != EAGAIN && send_errno != EWOULDBLOCK &&
                send_errno != EINTR) {
                status = SEND_FAILED;
                err = send_errno;
                break;
            }
            if (n > 0) {
                sent += n;
                last_progress = monotonic_s();
            }
        }
        /* Nap only while the right has enough queued to last it (or nothing more is
         * due to it) and the left still has much to send. */
        if (nap_bytes && recv_total - received > far) {
            int queued = 0;
            if (sent < send_total && ioctl(right, SIOCOUTQNSD, &queued) < 0) queued = 0;
            if (sent == send_total || queued > far) nanosleep(&nap, NULL);
        }
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&scratch_view);
    PyBuffer_Release(&out_view);
    PyMem_Free(send_at);
    PyMem_Free(recv_at);
    if (raised) return NULL;
    return Py_BuildValue("(iLLii)", status, received, sent, known, err);
}

static PyMethodDef methods[] = {
    {"relay", relay, METH_VARARGS,
     "relay(left_fd, right_fd, send_at, recv_at, header, nap_bytes, nap_s, timeout_s, scratch,"
     " zeros) -> (status, received, sent, known, err): Ring.relay's loop, compiled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_relay", "The ring's cut-through relay loop, compiled.", -1, methods,
};

PyMODINIT_FUNC PyInit__relay(void) { return PyModule_Create(&module); }
