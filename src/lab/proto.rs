//! The labgrid coordinator messages gatecmd uses, written by hand as prost derives from
//! labgrid 26's `labgrid/remote/proto/labgrid-coordinator.proto` (package `labgrid`):
//! field numbers and types are the wire contract, so each one is the .proto's. Only the
//! exporter stream, the client stream's place updates, the place acquire/release calls
//! (agent leases mirrored, `mirror.rs`) and the reservation list (whose reservation a
//! place's token is, `reservations.rs`) are here.

use std::collections::HashMap;

/// `/labgrid.Coordinator/ExporterStream`: bidirectional, exporter → coordinator first.
pub const EXPORTER_STREAM: &str = "/labgrid.Coordinator/ExporterStream";
/// `/labgrid.Coordinator/ClientStream`: bidirectional, for place updates.
pub const CLIENT_STREAM: &str = "/labgrid.Coordinator/ClientStream";

/// `StartupDone`: the first message of either stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StartupDone {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(string, tag = "2")]
    pub name: String,
}

/// `Resource.Path`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourcePath {
    #[prost(string, optional, tag = "1")]
    pub exporter_name: Option<String>,
    #[prost(string, tag = "2")]
    pub group_name: String,
    #[prost(string, tag = "3")]
    pub resource_name: String,
}

/// `MapValue`: one resource parameter.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MapValue {
    #[prost(oneof = "MapKind", tags = "1, 2, 3, 4, 5")]
    pub kind: Option<MapKind>,
}

/// `MapValue.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum MapKind {
    #[prost(bool, tag = "1")]
    Bool(bool),
    #[prost(int64, tag = "2")]
    Int(i64),
    #[prost(uint64, tag = "3")]
    Uint(u64),
    #[prost(double, tag = "4")]
    Float(f64),
    #[prost(string, tag = "5")]
    Text(String),
}

impl MapValue {
    pub fn text(s: impl Into<String>) -> Self {
        MapValue {
            kind: Some(MapKind::Text(s.into())),
        }
    }
    pub fn uint(n: u64) -> Self {
        MapValue {
            kind: Some(MapKind::Uint(n)),
        }
    }
    pub fn boolean(b: bool) -> Self {
        MapValue {
            kind: Some(MapKind::Bool(b)),
        }
    }
    /// labgrid's `None` (an unset oneof): a parameter with no value now.
    pub fn none() -> Self {
        MapValue { kind: None }
    }
}

/// `Resource`: one exported resource as the exporter announces it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, optional, tag = "1")]
    pub path: Option<ResourcePath>,
    #[prost(string, tag = "2")]
    pub cls: String,
    #[prost(map = "string, message", tag = "3")]
    pub params: HashMap<String, MapValue>,
    #[prost(map = "string, message", tag = "4")]
    pub extra: HashMap<String, MapValue>,
    /// The place that holds it; empty when none.
    #[prost(string, tag = "5")]
    pub acquired: String,
    #[prost(bool, tag = "6")]
    pub avail: bool,
}

/// `ExporterResponse`: the answer to one set-acquired request, in request order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExporterResponse {
    #[prost(bool, tag = "1")]
    pub success: bool,
    #[prost(string, optional, tag = "2")]
    pub reason: Option<String>,
}

/// `ExporterInMessage`: exporter → coordinator.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExporterInMessage {
    #[prost(oneof = "ExporterIn", tags = "1, 2, 3")]
    pub kind: Option<ExporterIn>,
}

/// `ExporterInMessage.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ExporterIn {
    #[prost(message, tag = "1")]
    Resource(Resource),
    #[prost(message, tag = "2")]
    Startup(StartupDone),
    #[prost(message, tag = "3")]
    Response(ExporterResponse),
}

/// `Hello`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Hello {
    #[prost(string, tag = "1")]
    pub version: String,
}

/// `ExporterSetAcquiredRequest`: acquire for `place_name`, or release when it is unset.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SetAcquired {
    #[prost(string, tag = "1")]
    pub group_name: String,
    #[prost(string, tag = "2")]
    pub resource_name: String,
    #[prost(string, optional, tag = "3")]
    pub place_name: Option<String>,
}

/// `ExporterOutMessage`: coordinator → exporter.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExporterOutMessage {
    #[prost(oneof = "ExporterOut", tags = "1, 2")]
    pub kind: Option<ExporterOut>,
}

/// `ExporterOutMessage.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ExporterOut {
    #[prost(message, tag = "1")]
    Hello(Hello),
    #[prost(message, tag = "2")]
    SetAcquired(SetAcquired),
}

/// `Sync`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sync {
    #[prost(uint64, tag = "1")]
    pub id: u64,
}

/// `Subscribe`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Subscribe {
    #[prost(bool, optional, tag = "1")]
    pub is_unsubscribe: Option<bool>,
    #[prost(oneof = "SubscribeKind", tags = "2, 3")]
    pub kind: Option<SubscribeKind>,
}

/// `Subscribe.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum SubscribeKind {
    #[prost(bool, tag = "2")]
    AllPlaces(bool),
    #[prost(bool, tag = "3")]
    AllResources(bool),
}

/// `ClientInMessage`: client → coordinator.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClientInMessage {
    #[prost(oneof = "ClientIn", tags = "1, 2, 3")]
    pub kind: Option<ClientIn>,
}

/// `ClientInMessage.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ClientIn {
    #[prost(message, tag = "1")]
    Sync(Sync),
    #[prost(message, tag = "2")]
    Startup(StartupDone),
    #[prost(message, tag = "3")]
    Subscribe(Subscribe),
}

/// `ResourceMatch`: one `EXPORTER/GROUP/CLASS[/NAME]` pattern of a place (fnmatch).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMatch {
    #[prost(string, tag = "1")]
    pub exporter: String,
    #[prost(string, tag = "2")]
    pub group: String,
    #[prost(string, tag = "3")]
    pub cls: String,
    #[prost(string, optional, tag = "4")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub rename: Option<String>,
}

/// `Place` (the fields gatecmd reads; the others are skipped on decode).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Place {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, string", tag = "4")]
    pub tags: HashMap<String, String>,
    #[prost(message, repeated, tag = "5")]
    pub matches: Vec<ResourceMatch>,
    /// `HOST/USER` of who acquired it; unset when free.
    #[prost(string, optional, tag = "6")]
    pub acquired: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub reservation: Option<String>,
}

/// `UpdateResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateResponse {
    #[prost(oneof = "Update", tags = "1, 2, 3, 4")]
    pub kind: Option<Update>,
}

/// `UpdateResponse.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Update {
    #[prost(message, tag = "1")]
    Resource(Resource),
    #[prost(message, tag = "2")]
    DelResource(ResourcePath),
    #[prost(message, tag = "3")]
    Place(Place),
    #[prost(string, tag = "4")]
    DelPlace(String),
}

/// `ClientOutMessage`: coordinator → client.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClientOutMessage {
    #[prost(message, optional, tag = "1")]
    pub sync: Option<Sync>,
    #[prost(message, repeated, tag = "2")]
    pub updates: Vec<UpdateResponse>,
}

/// `/labgrid.Coordinator/AcquirePlace`: acquires for the caller's client-stream name.
pub const ACQUIRE_PLACE: &str = "/labgrid.Coordinator/AcquirePlace";
/// `/labgrid.Coordinator/ReleasePlace`.
pub const RELEASE_PLACE: &str = "/labgrid.Coordinator/ReleasePlace";

/// `AcquirePlaceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AcquirePlaceRequest {
    #[prost(string, tag = "1")]
    pub placename: String,
}

/// `ReleasePlaceRequest`: with `fromuser`, a no-op unless that user holds the place.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReleasePlaceRequest {
    #[prost(string, tag = "1")]
    pub placename: String,
    #[prost(string, optional, tag = "2")]
    pub fromuser: Option<String>,
}

/// `AcquirePlaceResponse` / `ReleasePlaceResponse`: empty.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `/labgrid.Coordinator/GetReservations`: every reservation the coordinator has (who
/// owns a place's reservation token: `reservations.rs`).
pub const GET_RESERVATIONS: &str = "/labgrid.Coordinator/GetReservations";

/// `GetReservationsRequest`: empty.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetReservationsRequest {}

/// `GetReservationsResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetReservationsResponse {
    #[prost(message, repeated, tag = "1")]
    pub reservations: Vec<Reservation>,
}

/// `Reservation` (the fields gatecmd reads; filters, allocations and times are skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Reservation {
    /// The labgrid client name (`HOST/USER`) that made it: the only one that may acquire
    /// the place it is allocated.
    #[prost(string, tag = "1")]
    pub owner: String,
    /// What a place's `reservation` field carries.
    #[prost(string, tag = "2")]
    pub token: String,
    /// labgrid's `ReservationState`: 0 waiting, 1 allocated, 2 acquired, 3 expired, 4 invalid.
    #[prost(int32, tag = "3")]
    pub state: i32,
}

/// Opens one of the coordinator's bidirectional streams (`path`, e.g. `EXPORTER_STREAM`):
/// `rx` feeds gatecmd's side; the answer is the coordinator's. `which` names the stream in
/// the error when the coordinator refuses it.
pub async fn open_stream<In, Out>(
    channel: &tonic::transport::Channel,
    rx: tokio::sync::mpsc::Receiver<In>,
    path: &'static str,
    which: &'static str,
) -> Result<tonic::codec::Streaming<Out>, super::error::LabError>
where
    In: prost::Message + Send + 'static,
    Out: prost::Message + Default + Send + 'static,
{
    use super::error::LabError;
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.map_err(LabError::Coordinator)?;
    let codec = tonic_prost::ProstCodec::<In, Out>::default();
    let answer = grpc
        .streaming(
            tonic::Request::new(stream_of(rx)),
            tonic::codegen::http::uri::PathAndQuery::from_static(path),
            codec,
        )
        .await
        .map_err(|e| LabError::StreamRefused {
            which,
            message: e.message().to_string(),
        })?;
    Ok(answer.into_inner())
}

/// An mpsc receiver as the outbound stream of a gRPC streaming call.
pub fn stream_of<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_release_request_has_no_place_and_a_resource_keeps_its_params() {
        // Bytes of labgrid's own encoding (python protobuf 7) of
        // ExporterOutMessage(set_acquired_request=ExporterSetAcquiredRequest(group_name="b1",
        // resource_name="usb")): the place unset means release.
        let bytes = [
            0x12, 0x09, 0x0a, 0x02, b'b', b'1', 0x12, 0x03, b'u', b's', b'b',
        ];
        let msg = ExporterOutMessage::decode(&bytes[..]).expect("decodes");
        match msg.kind {
            Some(ExporterOut::SetAcquired(r)) => {
                assert_eq!(
                    (r.group_name.as_str(), r.resource_name.as_str()),
                    ("b1", "usb")
                );
                assert_eq!(r.place_name, None);
            }
            other => panic!("{other:?}"),
        }
        let mut r = Resource {
            cls: "NetworkSerialPort".into(),
            avail: true,
            ..Resource::default()
        };
        r.params.insert("port".into(), MapValue::uint(4000));
        let back = Resource::decode(&r.encode_to_vec()[..]).expect("round trip");
        assert_eq!(back, r);
    }

    #[test]
    fn a_reservation_list_names_each_token_s_owner() {
        // labgrid's own encoding (python protobuf 7) of GetReservationsResponse with one
        // Reservation(owner="desk/alice", token="ABC123", state=1, filters={"main":
        // Filter({"name": "p1"})}, allocations={"main": "p1"}, created=1.5, timeout=2.5):
        // the fields not declared here are skipped.
        let bytes = [
            0x0a, 0x4a, 0x0a, 0x0a, 0x64, 0x65, 0x73, 0x6b, 0x2f, 0x61, 0x6c, 0x69, 0x63, 0x65,
            0x12, 0x06, 0x41, 0x42, 0x43, 0x31, 0x32, 0x33, 0x18, 0x01, 0x2a, 0x14, 0x0a, 0x04,
            0x6d, 0x61, 0x69, 0x6e, 0x12, 0x0c, 0x0a, 0x0a, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65,
            0x12, 0x02, 0x70, 0x31, 0x32, 0x0a, 0x0a, 0x04, 0x6d, 0x61, 0x69, 0x6e, 0x12, 0x02,
            0x70, 0x31, 0x39, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x41, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x04, 0x40,
        ];
        let msg = GetReservationsResponse::decode(&bytes[..]).expect("decodes");
        assert_eq!(
            msg.reservations,
            [Reservation {
                owner: "desk/alice".into(),
                token: "ABC123".into(),
                state: 1,
            }]
        );
    }
}
