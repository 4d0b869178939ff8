/* The metrics endpoint under slowloris (issue 19, item 8): an attacker
 * process on loopback opens 4,200 connections, each sends the start of a
 * request and then one more header line every second, and reopens what the
 * server closes.  Meanwhile this process scrapes /metrics from the same
 * address (127.0.0.1, as a Prometheus on the same host would).
 *
 * What must hold: every scrape (one each 600 ms, over 6 s of reopening) is
 * answered in well under a second, and the endpoint
 * holds a bounded number of descriptors whatever the attacker opens.  The
 * test prints each scrape's time and the descriptors held. */
#include "../common/test_child.h"
#include "metrics_test_util.h"
#include "tent/transfer_engine.h"

/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define NSLOW      4200
#define TRICKLE_MS 1000 /* one header line per connection this often */
/* a closed connection is reopened 2 to 6 s later (spread over the slots,
 * as a slowloris client reopens what dropped while it cycles through the
 * rest) */
#define RECONNECT_MS     2000
#define RECONNECT_SPREAD 4000
#define CONNECT_BURST    32 /* new connections per 10 ms at most */
#define NSCRAPES         10
#define SCRAPE_EVERY     600  /* ms: the scrapes span a reconnect period */
#define SCRAPE_MS        500  /* "well under a second" */
#define GIVE_UP_MS       3000 /* a scrape not answered by then has failed */

static long now_ms(void)
{
    return (long)(mt_now() * 1000.0);
}

/* ---- the attacker -------------------------------------------------------- */

struct slow {
    int fd;
    bool connecting;
    long next_ms;
};

struct atk_status {
    int32_t open, ever, closed;
};

static void slow_close(struct slow *s, int i, long now, int *closed)
{
    close(s->fd);
    s->fd = -1;
    s->next_ms = now + RECONNECT_MS + (i * 7919L + *closed) % RECONNECT_SPREAD;
    (*closed)++;
}

static void attacker(int cmd_fd, int ans_fd, void *arg)
{
    uint16_t port = *(const uint16_t *)arg;
    signal(SIGPIPE, SIG_IGN);
    static const char start[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    static const char line[] = "X-a: b\r\n";
    struct slow *s = calloc(NSLOW, sizeof(*s));
    struct pollfd *p = calloc(NSLOW + 1, sizeof(*p));
    bool *ever = calloc(NSLOW, sizeof(*ever));
    long now = now_ms();
    for (int i = 0; i < NSLOW; i++)
        s[i] = (struct slow){.fd = -1, .next_ms = now};
    int closed = 0;
    for (;;) {
        now = now_ms();
        int budget = CONNECT_BURST;
        long wait = 10;
        for (int i = 0; i < NSLOW; i++) {
            struct slow *x = &s[i];
            if (x->fd < 0 && now >= x->next_ms && budget-- > 0) {
                struct sockaddr_in a = {.sin_family = AF_INET,
                                        .sin_port = htons(port)};
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                x->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
                if (connect(x->fd, (struct sockaddr *)&a, sizeof(a)) != 0 &&
                    errno != EINPROGRESS) {
                    slow_close(x, i, now, &closed);
                    continue;
                }
                x->connecting = true;
            } else if (x->fd >= 0 && !x->connecting && now >= x->next_ms) {
                x->next_ms = now + TRICKLE_MS;
                if (send(x->fd, line, sizeof(line) - 1,
                         MSG_NOSIGNAL | MSG_DONTWAIT) !=
                    (ssize_t)sizeof(line) - 1)
                    slow_close(x, i, now, &closed);
            }
            p[i].fd = x->fd;
            p[i].events = x->connecting ? POLLOUT : POLLIN | POLLRDHUP;
            p[i].revents = 0;
        }
        p[NSLOW] = (struct pollfd){.fd = cmd_fd, .events = POLLIN};
        poll(p, NSLOW + 1, (int)wait);
        now = now_ms();
        for (int i = 0; i < NSLOW; i++) {
            struct slow *x = &s[i];
            if (x->fd < 0 || !p[i].revents)
                continue;
            if (x->connecting) {
                int err = 0;
                socklen_t el = sizeof(err);
                getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err || send(x->fd, start, sizeof(start) - 1,
                                MSG_NOSIGNAL | MSG_DONTWAIT) !=
                               (ssize_t)sizeof(start) - 1) {
                    slow_close(x, i, now, &closed);
                    continue;
                }
                x->connecting = false;
                x->next_ms = now + TRICKLE_MS;
                ever[i] = true;
                continue;
            }
            char buf[4096];
            ssize_t r = recv(x->fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) ||
                (p[i].revents & (POLLHUP | POLLERR | POLLRDHUP)))
                slow_close(x, i, now, &closed);
        }
        if (p[NSLOW].revents) {
            char op;
            if (tc_read_all(cmd_fd, &op, 1) || op != 'S')
                _exit(0);
            struct atk_status st = {.closed = closed};
            for (int i = 0; i < NSLOW; i++) {
                st.open += s[i].fd >= 0 && !s[i].connecting;
                st.ever += ever[i];
            }
            tc_write_all(ans_fd, &st, sizeof(st));
        }
    }
}

/* Started by tc_spawn_child, a fresh process: the engine's threads run
 * when the attack starts, and a fork alone could leave the attacker a
 * lock one of them held. */
TC_CHILD_ROLE("slowloris", attacker)

static struct atk_status atk_status(int cmd, int ans)
{
    struct atk_status st = {0};
    char op = 'S';
    assert_int_equal(tc_write_all(cmd, &op, 1), 0);
    assert_int_equal(tc_read_all(ans, &st, sizeof(st)), 0);
    return st;
}

/* ---- the scraper --------------------------------------------------------- */

/* One scrape of /metrics on a new connection: ms until the whole answer
 * (200, the Prometheus text) is in; -1 when it did not come within
 * GIVE_UP_MS, -2 when the server closed the connection without it. */
static long scrape_ms(uint16_t port)
{
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Connection: close\r\n\r\n";
    long t0 = now_ms(), end = t0 + GIVE_UP_MS;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, (int)(end - now_ms())) != 1 ||
        send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) !=
            (ssize_t)sizeof(req) - 1) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 20, got = 0;
    char *buf = malloc(cap + 1);
    long ms = -1;
    for (;;) {
        long left = end - now_ms();
        p = (struct pollfd){.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) != 1)
            break;
        ssize_t r = recv(fd, buf + got, cap - got, 0);
        if (r > 0 && (got += (size_t)r) < cap)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        buf[got] = 0;
        if (strncmp(buf, "HTTP/1.1 200", 12) == 0 &&
            strstr(buf, "tent_write_bytes_total"))
            ms = now_ms() - t0;
        else
            ms = -2;
        break;
    }
    free(buf);
    close(fd);
    return ms;
}

static void test_scrapes_under_slowloris(void **state)
{
    (void)state;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max < 16384 ? rl.rlim_max : 16384;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < NSLOW + 1024)
        skip(); /* the attacker's 4,200 would not fit on either side */

    mt_config_quiet();
    tent_set_config("metrics/http_port", "0");
    int fds0 = mt_count_fds();
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    uint16_t port = mt_port(e);
    assert_true(port != 0);
    int engine_fds = mt_count_fds() - fds0;
    long alone = scrape_ms(port);
    assert_true(alone >= 0);

    int cmd = -1, ans = -1;
    pid_t pid = tc_spawn_child("slowloris", &port, sizeof(port), &cmd, &ans);
    assert_true(pid > 0);
    long end = now_ms() + 20000;
    while (atk_status(cmd, ans).ever < NSLOW && now_ms() < end)
        poll(NULL, 0, 50);
    /* every attacker connection has been in at least once; the scrapes
     * start once the ones the server holds have trickled twice and the
     * reopening of the others is under way (the attack in its steady
     * state, not its first seconds) */
    long t_attack = now_ms();
    while (now_ms() < t_attack + 2 * TRICKLE_MS)
        poll(NULL, 0, 100);
    struct atk_status as = atk_status(cmd, ans);
    int held = mt_count_fds() - fds0 - engine_fds;

    long ms[NSCRAPES];
    int ok = 0;
    long worst = 0;
    long next = now_ms();
    for (int i = 0; i < NSCRAPES; i++) {
        while (now_ms() < next)
            poll(NULL, 0, (int)(next - now_ms()));
        next = now_ms() + SCRAPE_EVERY;
        ms[i] = scrape_ms(port);
        ok += ms[i] >= 0 && ms[i] <= SCRAPE_MS;
        if (ms[i] < 0 || ms[i] > worst)
            worst = ms[i] < 0 ? GIVE_UP_MS : ms[i];
    }
    int held_after = mt_count_fds() - fds0 - engine_fds;
    struct atk_status as2 = atk_status(cmd, ans);
    printf("  alone: scrape %ld ms\n", alone);
    printf("  %d slow connections opened (%d open now, %d closed by the "
           "server): the endpoint holds %d descriptors (%d after the "
           "scrapes)\n",
           as.ever, as2.open, as2.closed, held, held_after);
    printf("  scrapes under attack:");
    for (int i = 0; i < NSCRAPES; i++) {
        if (ms[i] >= 0)
            printf(" %ld ms", ms[i]);
        else
            printf(ms[i] == -1 ? " timed out (%d ms)" : " refused", GIVE_UP_MS);
    }
    printf("; %d of %d within %d ms, worst %ld ms\n", ok, NSCRAPES, SCRAPE_MS,
           worst);
    fflush(stdout);

    char op = 'Q';
    (void)tc_write_all(cmd, &op, 1);
    waitpid(pid, NULL, 0);
    close(cmd);
    close(ans);
    assert_int_equal(as.ever, NSLOW);
    assert_int_equal(ok, NSCRAPES);
    /* a bounded share of a default 1,024-descriptor budget */
    assert_true(held < 512 && held_after < 512);
    /* and the endpoint serves as before once the attacker is gone */
    assert_true(scrape_ms(port) >= 0);
    tent_destroy_engine(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scrapes_under_slowloris),
    };
    return cmocka_run_group_tests_name("metrics_slowloris", tests, NULL, NULL);
}
