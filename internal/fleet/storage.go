package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// ErrCodeStoreFailed is the server's JSStreamStoreFailedF (10077): with
// DiscardNew it is how a stream at MaxMsgs or MaxBytes refuses a message.
// Oversized jobs, the other cause, are refused by Submit before publishing.
const ErrCodeStoreFailed jetstream.ErrorCode = 10077

// QuotaReason begins the error of a result whose job reached a quota or a
// cap of the fleet's storage (QuotaError): a stable text, as CancelReason.
const QuotaReason = "quota exceeded"

// StoreFull reports whether a write failed because the stream written is
// at one of its caps (its bytes or messages, where the stream refuses
// new ones): the server answers so only for these and for a stream being
// closed.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeStoreFailed
}

// storageErr names the cap of a stream the server refused to make or
// update because it cannot reserve the cap's bytes: every cap is
// reserved on the server's JetStream storage (max_file_store), and the
// caps of all the streams, each tenant's object stores included, must fit
// in it.
func storageErr(err error, stream string, maxBytes int64) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsErrStorageResourcesExceeded || apiErr.ErrorCode == jsErrInsufficientResources) {
		return &StorageReserveError{Stream: stream, MaxBytes: maxBytes, Err: err}
	}
	return err
}

// JetStream's error codes of a server that is out of storage to reserve
// (nats.go names neither).
const (
	jsErrInsufficientResources    jetstream.ErrorCode = 10023
	jsErrStorageResourcesExceeded jetstream.ErrorCode = 10047
)

// StorageReserveError: the server cannot reserve a stream's cap.
type StorageReserveError struct {
	Stream   string
	MaxBytes int64
	Err      error
}

func (e *StorageReserveError) Error() string {
	return fmt.Sprintf("the server cannot reserve the %s of the cap of %s: the caps of the streams together are over its JetStream storage (max_file_store; by default 75%% of the free disk): lower the caps or give JetStream more storage: %v",
		limits.Size(e.MaxBytes), e.Stream, e.Err)
}

func (e *StorageReserveError) Unwrap() error { return e.Err }

// CreateFirst creates kv[key] with data unless it exists: the first
// writer wins (RESULTS' rule). It returns whether data won, and otherwise
// the winner's value.
func CreateFirst(ctx context.Context, kv jetstream.KeyValue, key string, data []byte) (winner []byte, won bool, err error) {
	_, err = kv.Create(ctx, key, data)
	if err == nil {
		return data, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, false, fmt.Errorf("store result %s: %w", key, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, false, fmt.Errorf("read stored result %s: %w", key, err)
	}
	return e.Value(), false, nil
}

// Raced reports whether a KV write failed for the key's revision (a
// compare-and-swap lost to another writer): the codes differ between a
// stream of one replica and a replicated one.
func Raced(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
