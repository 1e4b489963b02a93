package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sandfleet/sandfleet/internal/metrics"
)

// gatewayMetrics are the metrics of one gateway, on a registry of its own. The route label is
// the route's pattern, never the path: IDs would make series unbounded.
// No label carries a token or its name.
type gatewayMetrics struct {
	reg      *metrics.Registry
	requests *metrics.CounterVec
	duration *metrics.HistogramVec
	inflight *metrics.Gauge
	slots    *metrics.GaugeVec
	refused  *metrics.CounterVec
}

func newMetrics() *gatewayMetrics {
	reg := metrics.NewRegistry()
	reg.Runtime()
	return &gatewayMetrics{
		reg: reg,
		requests: reg.CounterVec("sandfleet_gateway_requests_total",
			"HTTP requests answered, by route pattern and status code.", "route", "code"),
		duration: reg.HistogramVec("sandfleet_gateway_request_duration_seconds",
			"Time to answer a request, by route pattern (long polls and batch streams included).",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}, "route"),
		inflight: reg.Gauge("sandfleet_gateway_requests_in_flight", "Requests being served."),
		slots: reg.GaugeVec("sandfleet_gateway_slots_busy",
			"Long requests holding a slot: waiting (long polls), streams (event streams), batch, upload (batch bodies arriving).", "kind"),
		refused: reg.CounterVec("sandfleet_gateway_slots_refused_total",
			"Long requests refused 429 for want of a slot, by kind and by the bound reached: gateway, token or tenant.", "kind", "bound"),
	}
}

// MetricDescs are the metrics a gateway serves on /metrics: what
// "gateway metrics" prints and docs/metrics.md lists.
func MetricDescs() []metrics.Desc { return newMetrics().reg.Describe() }

func (m *gatewayMetrics) observe(route string, status int, d time.Duration) {
	if status == 0 {
		status = http.StatusOK
	}
	m.requests.With(route, strconv.Itoa(status)).Inc()
	m.duration.With(route).Observe(d.Seconds())
}

func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request, _ *Token) error {
	g.metrics.reg.Handler().ServeHTTP(w, r)
	return nil
}
