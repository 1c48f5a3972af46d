package fakellm

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"
)

func TestZZServe(t *testing.T) {
	if os.Getenv("ZZ_SCRIPT") == "" {
		t.Skip()
	}
	sc, err := Load(os.Getenv("ZZ_SCRIPT"))
	if err != nil {
		t.Fatal(err)
	}
	srv := Start(*sc)
	os.WriteFile("/tmp/pitry/url", []byte(srv.URL()), 0o644)
	fmt.Println(srv.URL())
	time.Sleep(40 * time.Second)
	b, _ := json.MarshalIndent(srv.Requests(), "", " ")
	os.WriteFile("/tmp/pitry/requests.json", b, 0o644)
}
