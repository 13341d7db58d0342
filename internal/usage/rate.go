package usage

import "time"

// MinRateWindow is the shortest generation time a tokens-per-second
// figure may rest on: shorter ones measure overhead, not generation.
const MinRateWindow = 10 * time.Millisecond

// Rate reads the completion tokens of a finished answer's tail (0 when
// it reports none) and its generation speed: the tokens over the time
// from the first byte to the end for a stream, over the whole exchange
// (total) otherwise; the speed is 0 when that time is below
// MinRateWindow.
func Rate(tail []byte, stream bool, total, firstByte time.Duration) (tokens int, perSecond float64) {
	n, ok := CompletionTokens(tail)
	if !ok || n <= 0 {
		return 0, 0
	}
	window := total
	if stream {
		window = total - firstByte
	}
	if window < MinRateWindow {
		return n, 0
	}
	return n, float64(n) / window.Seconds()
}
