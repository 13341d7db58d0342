package operator

import (
	"fmt"
	"strconv"
)

// HumanBytes renders a byte count in binary units with one decimal
// ("512B", "1.5GiB"), sep between the number and the unit: `nodeld ctl
// nodes` prints it without one to keep its columns narrow, the fleet page
// with a space.
func HumanBytes(n uint64, sep string) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + sep + "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%s%ciB", float64(n)/float64(div), sep, "KMGTP"[exp])
}
