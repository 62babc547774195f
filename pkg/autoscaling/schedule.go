package autoscaling

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	// Time zones are named in schedules; the images have no zoneinfo of
	// their own, so the database comes with the binary.
	_ "time/tzdata"
)

// A Schedule raises min-scale at times of the week (min-scale-schedule):
//
//	tz=Europe/Berlin; Mon-Fri 08:00-18:00=3; Sat,Sun 10:00-14:00=1
//
// Rules are separated by semicolons. Each names days (Mon … Sun, lists
// with commas, ranges with a dash, which may wrap as Fri-Mon, or * for
// every day), a span of the day from HH:MM to HH:MM (24:00 ends at
// midnight; an end before the start runs past midnight into the next
// day), and the fewest pods then. Where rules overlap, the largest count
// holds. An optional tz=ZONE (an IANA time zone, default UTC) says whose
// clock the times are on. The zero Schedule has no rules.
type Schedule struct {
	// Zone is the IANA name of the schedule's time zone; "" is UTC.
	Zone  string
	Rules []ScheduleRule
	loc   *time.Location
}

// ScheduleRule is one rule of a Schedule.
type ScheduleRule struct {
	// Days has bit d set for each time.Weekday d the rule starts on.
	Days uint8
	// From and To are minutes since midnight; To ≤ From runs past
	// midnight. To may be 1440 (24:00).
	From, To int
	// Scale is the fewest pods while the rule holds.
	Scale int
}

// maxScheduleRules bounds a schedule's rules.
const maxScheduleRules = 32

var weekdays = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// At returns the largest scale a rule asks for at t; 0 when none holds.
func (s *Schedule) At(t time.Time) int {
	if len(s.Rules) == 0 {
		return 0
	}
	loc := s.loc
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	day, minute := t.Weekday(), t.Hour()*60+t.Minute()
	yesterday := (day + 6) % 7
	n := 0
	for _, r := range s.Rules {
		var on bool
		if r.From < r.To {
			on = r.Days&(1<<day) != 0 && minute >= r.From && minute < r.To
		} else {
			on = r.Days&(1<<day) != 0 && minute >= r.From || r.Days&(1<<yesterday) != 0 && minute < r.To
		}
		if on {
			n = max(n, r.Scale)
		}
	}
	return n
}

// Max is the largest scale any rule asks for.
func (s *Schedule) Max() int {
	n := 0
	for _, r := range s.Rules {
		n = max(n, r.Scale)
	}
	return n
}

// String writes the schedule in its canonical form, which ParseSchedule
// reads back to the same Schedule.
func (s Schedule) String() string {
	var parts []string
	if s.Zone != "" {
		parts = append(parts, "tz="+s.Zone)
	}
	for _, r := range s.Rules {
		parts = append(parts, formatDays(r.Days)+" "+formatMinute(r.From)+"-"+formatMinute(r.To)+"="+strconv.Itoa(r.Scale))
	}
	return strings.Join(parts, "; ")
}

func formatMinute(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// formatDays writes days as runs of consecutive days, Monday first.
func formatDays(days uint8) string {
	if days == 0x7f {
		return "*"
	}
	var parts []string
	order := [7]int{1, 2, 3, 4, 5, 6, 0}
	for i := 0; i < 7; {
		if days&(1<<order[i]) == 0 {
			i++
			continue
		}
		j := i
		for j+1 < 7 && days&(1<<order[j+1]) != 0 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, weekdays[order[i]])
		case j == i+1:
			parts = append(parts, weekdays[order[i]], weekdays[order[j]])
		default:
			parts = append(parts, weekdays[order[i]]+"-"+weekdays[order[j]])
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ParseSchedule reads a schedule's text; "" is no schedule. The problem,
// when there is one, names the part at fault.
func ParseSchedule(text string) (Schedule, string) {
	var s Schedule
	for part := range strings.SplitSeq(text, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if zone, ok := strings.CutPrefix(part, "tz="); ok {
			if s.Zone != "" {
				return Schedule{}, "names a time zone twice"
			}
			zone = strings.TrimSpace(zone)
			loc, err := time.LoadLocation(zone)
			if err != nil || zone == "" || zone == "Local" {
				return Schedule{}, fmt.Sprintf("has an unknown time zone %q (an IANA name such as Europe/Berlin)", zone)
			}
			s.Zone, s.loc = zone, loc
			continue
		}
		r, problem := parseRule(part)
		if problem != "" {
			return Schedule{}, fmt.Sprintf("rule %q %s", part, problem)
		}
		s.Rules = append(s.Rules, r)
		if len(s.Rules) > maxScheduleRules {
			return Schedule{}, fmt.Sprintf("has more than %d rules", maxScheduleRules)
		}
	}
	if s.Zone == "UTC" {
		s.Zone, s.loc = "", nil
	}
	return s, ""
}

func parseRule(part string) (ScheduleRule, string) {
	days, rest, ok := strings.Cut(part, " ")
	if !ok {
		return ScheduleRule{}, "is not DAYS HH:MM-HH:MM=PODS"
	}
	span, scale, ok := strings.Cut(strings.TrimSpace(rest), "=")
	if !ok {
		return ScheduleRule{}, "has no =PODS"
	}
	var r ScheduleRule
	var problem string
	if r.Days, problem = parseDays(days); problem != "" {
		return r, problem
	}
	from, to, ok := strings.Cut(strings.TrimSpace(span), "-")
	if !ok {
		return r, "has no span HH:MM-HH:MM"
	}
	if r.From, ok = parseMinute(from, false); !ok {
		return r, fmt.Sprintf("starts at %q, not a time from 00:00 to 23:59", from)
	}
	if r.To, ok = parseMinute(to, true); !ok {
		return r, fmt.Sprintf("ends at %q, not a time from 00:00 to 24:00", to)
	}
	if r.From == r.To {
		return r, "spans no time (for a whole day write 00:00-24:00)"
	}
	n, err := strconv.Atoi(strings.TrimSpace(scale))
	if err != nil || n < 1 || n > 1<<20 {
		return r, fmt.Sprintf("asks for %q pods, not an integer ≥ 1", strings.TrimSpace(scale))
	}
	r.Scale = n
	return r, ""
}

func dayIndex(name string) (int, bool) {
	for i, d := range weekdays {
		if strings.EqualFold(name, d) {
			return i, true
		}
	}
	return 0, false
}

func parseDays(text string) (uint8, string) {
	if text == "*" {
		return 0x7f, ""
	}
	var days uint8
	for item := range strings.SplitSeq(text, ",") {
		a, b, isRange := strings.Cut(item, "-")
		i, ok := dayIndex(a)
		if !ok {
			return 0, fmt.Sprintf("names the day %q (Mon, Tue, Wed, Thu, Fri, Sat, Sun, ranges such as Mon-Fri, or *)", a)
		}
		j := i
		if isRange {
			if j, ok = dayIndex(b); !ok {
				return 0, fmt.Sprintf("names the day %q (Mon, Tue, Wed, Thu, Fri, Sat, Sun, ranges such as Mon-Fri, or *)", b)
			}
		}
		for d := i; ; d = (d + 1) % 7 {
			days |= 1 << d
			if d == j {
				break
			}
		}
	}
	return days, ""
}

// parseMinute reads HH:MM as minutes since midnight; 24:00 only as an end.
func parseMinute(text string, end bool) (int, bool) {
	h, m, ok := strings.Cut(strings.TrimSpace(text), ":")
	if !ok || len(h) == 0 || len(h) > 2 || len(m) != 2 {
		return 0, false
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	switch {
	case err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59:
		return 0, false
	case hh == 24 && mm == 0 && end:
		return 24 * 60, true
	case hh > 23:
		return 0, false
	}
	return hh*60 + mm, true
}

// clone copies the rules, so that a Spec's copy shares nothing mutable.
func (s Schedule) clone() Schedule {
	s.Rules = slices.Clone(s.Rules)
	return s
}
