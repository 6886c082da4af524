package kafka

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/effectively/effectively/internal/intake/retention"
)

// TopicLife is what bounds the life of a record in a topic's log, as the
// broker reports the topic's configuration.
type TopicLife struct {
	// Retention is retention.ms: a segment is deleted once its newest
	// record is older.
	Retention time.Duration
	// Segment is segment.ms: the longest a segment stays open, so the
	// longest a record waits for its segment's newest record.
	Segment time.Duration
	// CleanupPolicy is cleanup.policy ("delete", "compact" or both).
	CleanupPolicy string
}

// Horizon is the longest a record can stay readable after it was appended:
// retention.ms plus segment.ms (deletion is per segment; the broker's
// deletion check interval, 5 minutes by default, is left to the retention
// margin). A group re-reads any record still in the log when its offsets
// are reset or expire (offsets.retention.minutes), so a copy can arrive
// that long after the first one was recorded.
func (l TopicLife) Horizon() (time.Duration, error) {
	for _, p := range strings.Split(l.CleanupPolicy, ",") {
		if strings.TrimSpace(p) == "compact" {
			return 0, fmt.Errorf("%w: cleanup.policy=%s keeps the latest record of every key for as long as the topic exists; use cleanup.policy=delete", retention.ErrNoHorizon, l.CleanupPolicy)
		}
	}
	if l.Retention < 0 {
		return 0, fmt.Errorf("%w: retention.ms=-1 keeps every record for as long as the topic exists; set a finite retention.ms", retention.ErrNoHorizon)
	}
	if l.Retention == 0 || l.Segment <= 0 {
		return 0, fmt.Errorf("%w: retention.ms=%d, segment.ms=%d: both must be positive", retention.ErrNoHorizon, l.Retention.Milliseconds(), l.Segment.Milliseconds())
	}
	if l.Retention > math.MaxInt64-l.Segment {
		return 0, fmt.Errorf("%w: retention.ms=%d and segment.ms=%d add up to more than 292 years, as good as forever; set a finite retention.ms", retention.ErrNoHorizon, l.Retention.Milliseconds(), l.Segment.Milliseconds())
	}
	return l.Retention + l.Segment, nil
}

// ReadTopicLife reads topic's retention.ms, segment.ms and cleanup.policy
// from the broker (the values in force: the topic's own, else the
// broker's).
func ReadTopicLife(ctx context.Context, adm *kadm.Client, topic string) (TopicLife, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return TopicLife{}, fmt.Errorf("describe topic %s configs: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return TopicLife{}, fmt.Errorf("describe topic %s configs: %w", topic, err)
	}
	var l TopicLife
	seen := map[string]bool{}
	for _, c := range rc.Configs {
		if c.Value == nil {
			continue
		}
		v := *c.Value
		switch c.Key {
		case "retention.ms", "segment.ms":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return TopicLife{}, fmt.Errorf("topic %s: %s=%q is not a number of milliseconds", topic, c.Key, v)
			}
			d := time.Duration(ms) * time.Millisecond
			if ms < 0 {
				d = -1
			}
			if ms > math.MaxInt64/int64(time.Millisecond) {
				// More than a Duration holds (292 years): as good as
				// forever, and never wrapped around to a short horizon.
				return TopicLife{}, fmt.Errorf("%w: topic %s: %s=%d is more than 292 years, as good as forever; set a finite %s", retention.ErrNoHorizon, topic, c.Key, ms, c.Key)
			}
			if c.Key == "retention.ms" {
				l.Retention = d
			} else {
				l.Segment = d
			}
		case "cleanup.policy":
			l.CleanupPolicy = v
		default:
			continue
		}
		seen[c.Key] = true
	}
	for _, k := range []string{"retention.ms", "segment.ms", "cleanup.policy"} {
		if !seen[k] {
			return TopicLife{}, fmt.Errorf("topic %s: the broker did not report %s", topic, k)
		}
	}
	return l, nil
}

// Horizon reads the consumed topic's configuration and returns its
// redelivery horizon (TopicLife.Horizon; Kafka has no publish dedup, so no
// duplicate window); a topic without one is an error wrapping
// retention.ErrNoHorizon that names the topic and the setting.
func (c *Consumer) Horizon(ctx context.Context) (retention.SourceHorizon, error) {
	l, err := ReadTopicLife(ctx, kadm.NewClient(c.cl), c.cfg.Topic)
	if err != nil {
		return retention.SourceHorizon{}, fmt.Errorf("source %s: %w", c.cfg.Name, err)
	}
	h, err := l.Horizon()
	if err != nil {
		return retention.SourceHorizon{}, fmt.Errorf("source %s: topic %s: %w", c.cfg.Name, c.cfg.Topic, err)
	}
	return retention.SourceHorizon{
		Source: c.cfg.Name, Redelivery: h,
		Basis: fmt.Sprintf("topic %s: retention.ms %d + segment.ms %d", c.cfg.Topic, l.Retention.Milliseconds(), l.Segment.Milliseconds()),
	}, nil
}
