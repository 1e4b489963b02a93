package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics of one gateway, on a registry of its own. The route label is
// the route's pattern, never the path: IDs would make series unbounded.
// No label carries a token or its name.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
	slots    *prometheus.GaugeVec
	handler  http.Handler
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandfleet_gateway_requests_total",
			Help: "HTTP requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandfleet_gateway_request_duration_seconds",
			Help:    "Time to answer a request, by route pattern (long polls and batch streams included).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandfleet_gateway_requests_in_flight",
			Help: "Requests being served.",
		}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandfleet_gateway_slots_busy",
			Help: "Long requests holding a slot: waiting (long polls) and batch.",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.inflight, m.slots)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	if status == 0 {
		status = http.StatusOK
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request, _ *Token) error {
	g.metrics.handler.ServeHTTP(w, r)
	return nil
}
