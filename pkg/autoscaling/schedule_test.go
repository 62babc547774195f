package autoscaling

import (
	"testing"
	"time"
)

func TestScheduleAt(t *testing.T) {
	s, problem := ParseSchedule("Mon-Fri 08:00-18:00=3; Sat 22:00-02:00=2; Mon 09:00-10:00=5")
	if problem != "" {
		t.Fatal(problem)
	}
	// 2024-01-01 is a Monday.
	at := func(day int, hhmm string) time.Time {
		d, _ := time.Parse("15:04", hhmm)
		return time.Date(2024, 1, day, d.Hour(), d.Minute(), 0, 0, time.UTC)
	}
	for _, c := range []struct {
		t    time.Time
		want int
	}{
		{at(1, "07:59"), 0}, {at(1, "08:00"), 3}, {at(1, "09:30"), 5}, {at(1, "10:00"), 3}, {at(1, "17:59"), 3}, {at(1, "18:00"), 0},
		{at(5, "12:00"), 3}, // Friday
		{at(6, "12:00"), 0}, // Saturday midday
		{at(6, "22:00"), 2}, {at(6, "23:59"), 2},
		{at(7, "01:59"), 2}, {at(7, "02:00"), 0}, // past midnight into Sunday
		{at(8, "01:00"), 0}, // Monday night: the Saturday rule does not hold
	} {
		if got := s.At(c.t); got != c.want {
			t.Errorf("At(%s %s) = %d, want %d", c.t.Weekday(), c.t.Format("15:04"), got, c.want)
		}
	}
	if s.Max() != 5 {
		t.Errorf("Max = %d", s.Max())
	}
}

// A zone moves the rules: 08:00 in Berlin is 07:00 UTC in winter.
func TestScheduleZone(t *testing.T) {
	s, problem := ParseSchedule("tz=Europe/Berlin; Mon 08:00-09:00=2")
	if problem != "" {
		t.Fatal(problem)
	}
	winter := time.Date(2024, 1, 1, 7, 30, 0, 0, time.UTC)
	if s.At(winter) != 2 || s.At(winter.Add(-time.Hour)) != 0 {
		t.Errorf("At(07:30 UTC) = %d, At(06:30 UTC) = %d; want 2 and 0", s.At(winter), s.At(winter.Add(-time.Hour)))
	}
	var none Schedule
	if none.At(winter) != 0 || none.String() != "" {
		t.Errorf("the empty schedule: %d %q", none.At(winter), none.String())
	}
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"Mon-Fri 08:00-18:00=3", "tz=Europe/Berlin; * 22:00-06:00=2", "Fri-Mon 00:00-24:00=1", ";;", "Mon 8:0-9:00=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, problem := ParseSchedule(text)
		if problem != "" {
			return
		}
		// The canonical text reads back to the same schedule.
		again, problem := ParseSchedule(s.String())
		if problem != "" || again.String() != s.String() {
			t.Fatalf("%q → %q → %q (%s)", text, s.String(), again.String(), problem)
		}
		_ = s.At(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	})
}
