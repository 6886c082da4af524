package rabbitmq_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/tools/rabbittest"
)

func v(s string) rabbitmq.Version {
	ver, err := rabbitmq.ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return ver
}

// TestAttemptsOf: each server version's counting, by the headers that
// version sends.
func TestAttemptsOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version string
		headers amqp.Table
		want    rabbitmq.Attempts
	}{
		{"3.x first delivery: no header", "3.10.8", nil, rabbitmq.Attempts{Delivery: 1, Failures: 0}},
		{"3.x: every return counts", "3.10.8", amqp.Table{"x-delivery-count": int64(3)}, rabbitmq.Attempts{Delivery: 4, Failures: 3}},
		{"3.13 int32 header", "3.13.7", amqp.Table{"x-delivery-count": int32(2)}, rabbitmq.Attempts{Delivery: 3, Failures: 2}},
		{"4.0 counts like 3.x", "4.0.5", amqp.Table{"x-delivery-count": int64(2)}, rabbitmq.Attempts{Delivery: 3, Failures: 2}},
		{"4.2 counts like 3.x, an x-acquired-count is ignored", "4.2.1", amqp.Table{"x-delivery-count": int64(2), "x-acquired-count": int64(7)}, rabbitmq.Attempts{Delivery: 3, Failures: 2}},
		// 4.3: two nacks and a closed channel (acquired 3), one reject
		// (delivery count 1): the delivery is the 5th, the broker holds 1.
		{"4.3: only rejects count toward the limit, acquisitions count deliveries", "4.3.0", amqp.Table{"x-delivery-count": int64(1), "x-acquired-count": int64(4)}, rabbitmq.Attempts{Delivery: 5, Failures: 1}},
		{"4.3 first delivery", "4.3.0", nil, rabbitmq.Attempts{Delivery: 1, Failures: 0}},
		{"4.3 nacked only: no delivery count", "4.3.1", amqp.Table{"x-acquired-count": int64(2)}, rabbitmq.Attempts{Delivery: 3, Failures: 0}},
		{"5.0 like 4.3", "5.0.0-beta.1", amqp.Table{"x-acquired-count": int64(1)}, rabbitmq.Attempts{Delivery: 2, Failures: 0}},
		{"malformed header reads 0", "3.10.8", amqp.Table{"x-delivery-count": "three"}, rabbitmq.Attempts{Delivery: 1, Failures: 0}},
		{"negative header reads 0", "4.3.0", amqp.Table{"x-acquired-count": int64(-4)}, rabbitmq.Attempts{Delivery: 1, Failures: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rabbitmq.AttemptsOf(v(tc.version), tc.headers); got != tc.want {
				t.Fatalf("rabbitmq.AttemptsOf(%s, %v) = %+v, want %+v", tc.version, tc.headers, got, tc.want)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]rabbitmq.Version{"3.10.8": {3, 10, 8}, "4.3": {4, 3, 0}, "4.3.0-rc.1": {4, 3, 0}, "3.13.7+generic": {3, 13, 7}} {
		if got, err := rabbitmq.ParseVersion(in); err != nil || got != want {
			t.Errorf("rabbitmq.ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "4", "x.y", "4.-1.0", "1.2.3.4"} {
		if _, err := rabbitmq.ParseVersion(bad); err == nil {
			t.Errorf("rabbitmq.ParseVersion(%q) accepted", bad)
		}
	}
}

// TestAttemptsOnThisServer returns one message by each of reject, nack and
// a closed channel on the real server and reads rabbitmq.AttemptsOf after each: on
// 3.x (here, 3.10.8) every return counts; on 4.3 only the reject would.
func TestAttemptsOnThisServer(t *testing.T) {
	cfg := rabbittest.Config(t, rabbittest.URL())
	conn := rabbittest.Dial(t, cfg.URL)
	version, err := rabbitmq.ServerVersion(conn.Properties)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.Declare(ch, cfg); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish(cfg.Exchange, "order.placed", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	get := func(ch *amqp.Channel) amqp.Delivery {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			d, ok, err := ch.Get(cfg.Queue, false)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatal("no message in the queue")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var got []rabbitmq.Attempts
	d := get(ch)
	got = append(got, rabbitmq.AttemptsOf(version, d.Headers))
	if err := d.Reject(true); err != nil {
		t.Fatal(err)
	}
	d = get(ch)
	got = append(got, rabbitmq.AttemptsOf(version, d.Headers))
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	d = get(ch)
	got = append(got, rabbitmq.AttemptsOf(version, d.Headers))
	_ = ch.Close() // unacked: returned with the channel
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d = get(ch2)
	got = append(got, rabbitmq.AttemptsOf(version, d.Headers))
	_ = d.Ack(false)

	want := []rabbitmq.Attempts{{1, 0}, {2, 1}, {3, 2}, {4, 3}} // 3.x and 4.0–4.2
	if version.Major > 4 || (version.Major == 4 && version.Minor >= 3) {
		want = []rabbitmq.Attempts{{1, 0}, {2, 1}, {3, 1}, {4, 1}}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("server %s: attempts after first delivery, reject, nack, channel close = %+v, want %+v", version, got, want)
		}
	}
}
