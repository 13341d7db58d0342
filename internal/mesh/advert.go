package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nodeld/nodeld/internal/table"
)

// FrameAdverts is the frame type of the one frame of an advert stream: a
// JSON list of table.Advertisement.
const FrameAdverts FrameType = 1

var (
	errMalformedAdverts = errors.New("malformed advert frame")
	errTooManyAdverts   = errors.New("too many advertisements in one frame")
)

// encodeAdverts marshals ads for one advert frame, refusing more than
// MaxAdvertsPerFrame or a frame over MaxAdvertFrameBytes.
func encodeAdverts(ads []table.Advertisement) ([]byte, error) {
	if len(ads) > MaxAdvertsPerFrame {
		return nil, fmt.Errorf("%d advertisements: %w", len(ads), errTooManyAdverts)
	}
	if ads == nil {
		ads = []table.Advertisement{}
	}
	b, err := json.Marshal(ads)
	if err != nil {
		return nil, fmt.Errorf("encode advertisements: %w", err)
	}
	if len(b) > MaxAdvertFrameBytes {
		return nil, fmt.Errorf("advert frame of %d bytes: %w", len(b), ErrFrameTooLarge)
	}
	return b, nil
}

// decodeAdverts parses an advert frame payload: exactly one JSON list of
// advertisements with known fields only, counted while decoding so that no
// more than MaxAdvertsPerFrame are ever built.
func decodeAdverts(p []byte) ([]table.Advertisement, error) {
	if len(p) > MaxAdvertFrameBytes {
		return nil, fmt.Errorf("advert frame of %d bytes: %w", len(p), ErrFrameTooLarge)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformedAdverts, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("%w: not a list", errMalformedAdverts)
	}
	var ads []table.Advertisement
	for dec.More() {
		if len(ads) == MaxAdvertsPerFrame {
			return nil, errTooManyAdverts
		}
		var ad table.Advertisement
		if err := dec.Decode(&ad); err != nil {
			return nil, fmt.Errorf("%w: advertisement %d: %v", errMalformedAdverts, len(ads), err)
		}
		ads = append(ads, ad)
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return nil, fmt.Errorf("%w: %v", errMalformedAdverts, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the list", errMalformedAdverts)
	}
	return ads, nil
}
