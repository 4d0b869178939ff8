/* Public metrics functions: the engine's registry rendered into a caller's
 * buffer, and the address of its HTTP endpoint. */
#include "common/error.h"
#include "metrics/metrics.h"
#include "runtime/engine.h"

#include <stdlib.h>
#include <string.h>

static int render_into(tent_engine_t engine, enum tm_format fmt, char *buf,
                       size_t *len, const char *what)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "%s: engine is NULL", what);
    if (!buf || !len)
        return tent_set_error(TENT_ENULL, "%s: buf or len is NULL", what);
    if (!e->metrics)
        return tent_set_error(TENT_ENOTSUP,
                              "%s: metrics are disabled (metrics/enabled = "
                              "false or TENT_METRICS_ENABLED=false)",
                              what);
    char *text = NULL;
    size_t n = 0;
    int rc = tent_metrics_render(e->metrics, fmt, &text, &n);
    if (rc)
        return rc;
    if (n + 1 > *len) {
        rc = tent_set_error(TENT_EOVERFLOW,
                            "%s: buffer of %zu bytes is too small for %zu "
                            "bytes of metrics",
                            what, *len, n + 1);
        *len = n + 1;
    } else {
        memcpy(buf, text, n + 1);
        *len = n;
    }
    free(text);
    return rc;
}

int tent_metrics_prometheus(tent_engine_t engine, char *buf, size_t *len)
{
    return render_into(engine, TM_FMT_PROMETHEUS, buf, len,
                       "tent_metrics_prometheus");
}

int tent_metrics_json(tent_engine_t engine, char *buf, size_t *len)
{
    return render_into(engine, TM_FMT_JSON, buf, len, "tent_metrics_json");
}

int tent_metrics_http_addr_port(tent_engine_t engine, char *addr_buf,
                                size_t buf_len, uint16_t *port)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_metrics_http_addr_port: engine is NULL");
    if (!addr_buf || !port)
        return tent_set_error(TENT_ENULL, "tent_metrics_http_addr_port: "
                                          "addr_buf or port is NULL");
    if (!e->metrics)
        return tent_set_error(TENT_ENOTSUP,
                              "tent_metrics_http_addr_port: metrics are "
                              "disabled");
    return tent_metrics_http_addr(e->metrics, addr_buf, buf_len, port);
}
