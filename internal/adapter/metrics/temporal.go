package metrics

import (
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// TemporalHandler returns a metrics handler for the Temporal client
// (client.Options.MetricsHandler) that reports the SDK's metrics
// (temporal_request_total, temporal_workflow_task_execution_latency_seconds,
// temporal_activity_execution_failed_total, …) to reg, so they are served on
// the same /metrics. Close the returned closer on exit to flush.
func TemporalHandler(reg prometheus.Registerer) (client.MetricsHandler, io.Closer) {
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer: reg,
		// Histograms, not summaries: they aggregate across workers.
		DefaultTimerType: tallyprom.HistogramTimerType,
		OnRegisterError:  func(error) {}, // a metric the SDK re-registers is already there
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sanitize,
	}, time.Second)
	return sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), closer
}

// sanitize is what the Temporal samples use: Prometheus' character set.
var sanitize = tally.SanitizeOptions{
	NameCharacters:       tally.ValidCharacters{Ranges: tally.AlphanumericRange, Characters: tally.UnderscoreCharacters},
	KeyCharacters:        tally.ValidCharacters{Ranges: tally.AlphanumericRange, Characters: tally.UnderscoreCharacters},
	ValueCharacters:      tally.ValidCharacters{Ranges: tally.AlphanumericRange, Characters: tally.UnderscoreCharacters},
	ReplacementCharacter: tally.DefaultReplacementCharacter,
}
