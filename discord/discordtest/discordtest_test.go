package discordtest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/discord/discordtest"
)

func TestFakeDiscord(t *testing.T) {
	fd := discordtest.New(t)
	ok := fd.Webhook("111")
	limited := fd.Webhook("222", discordtest.Reply{Status: 429, Body: `{"retry_after":0.01,"global":false}`}, discordtest.Reply{Status: 204})
	c := &discord.Client{HTTP: fd.HTTPClient()}
	ctx := context.Background()
	if err := discord.ValidWebhookURL(ok); err != nil {
		t.Fatalf("the fake's URL is not a webhook URL: %v", err)
	}
	res, err := c.Send(ctx, ok, discord.Message{Content: "hello"})
	if err != nil || res.Status != http.StatusOK || res.Attempts != 1 {
		t.Fatalf("Send = %+v, %v", res, err)
	}
	if res, err = c.Send(ctx, limited, discord.Message{Content: "again"}); err != nil || res.Attempts != 2 || res.Status != http.StatusNoContent {
		t.Fatalf("Send after 429 = %+v, %v", res, err)
	}
	_, err = c.Send(ctx, "https://discord.com/api/webhooks/333/nosuchtoken", discord.Message{Content: "x"})
	if !errors.Is(err, discord.ErrWebhookDeleted) {
		t.Fatalf("unknown webhook: %v, want ErrWebhookDeleted", err)
	}
	calls := fd.WaitCalls(t, 3, time.Second)
	if len(calls) != 3 || calls[0].WebhookID != "111" || calls[0].Message.Content != "hello" ||
		calls[1].Status != 429 || calls[2].Status != 204 || len(fd.CallsTo("222")) != 2 {
		t.Fatalf("calls = %+v", calls)
	}
}
